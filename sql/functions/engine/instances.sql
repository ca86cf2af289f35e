-- What a host writes about itself beside its heartbeat.

-- A host's descriptors, upserted at start and on its snapshot tick.
create function {{schema}}.report_descriptors(p_instance text, p_subjects text[], p_names text[], p_hashes text[],
    p_descriptors jsonb[]) returns void
  language sql
  as $$
    insert into {{schema}}.descriptor_reports (subject, name, instance_id, hash, descriptor)
    select * from unnest(p_subjects, p_names, array_fill(p_instance, array[cardinality(p_names)]), p_hashes,
                         p_descriptors)
    on conflict (subject, name, instance_id) do update
      set hash = excluded.hash, descriptor = excluded.descriptor, reported_at = now()
  $$;
