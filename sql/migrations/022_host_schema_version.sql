-- Each worker host records the schema version its build was made for when it registers, so `awa migrate --check`
-- reads it rather than inferring it from when the host (re-)registered: a host whose row was re-made after a
-- migration would otherwise look built for the newer version.
-- rolling: safe: a nullable column the previous release never names; its hosts register without it and are judged as before
alter table {{schema}}.runtime_instances add column schema_version int;
