//! The registry's statements (`policy_registry.rs` runs them).

use crate::postgres::sql::NOW;

/// The statements, for the quoted schema `s`.
#[derive(Debug)]
pub(in crate::postgres) struct RegistrySql {
    pub(in crate::postgres) read_one: String,
    pub(in crate::postgres) read_all: String,
    pub(in crate::postgres) insert: String,
    pub(in crate::postgres) update: String,
    pub(in crate::postgres) component: String,
    pub(in crate::postgres) setting: String,
    pub(in crate::postgres) set_setting: String,
}

impl RegistrySql {
    pub(in crate::postgres) fn new(s: &str) -> Self {
        // The clock at $2/$3.
        let now23 = NOW.replace("$2", "$3").replace("$1", "$2");
        // Keeps the component ($4 digest, $5 bytes; NULL: none) only when
        // the registration write `w` happened.
        let keep = format!(
            "c AS (INSERT INTO {s}.policy_components (digest, component) \
             SELECT $4::text, $5::bytea FROM w WHERE $4::text IS NOT NULL \
             ON CONFLICT (digest) DO NOTHING)"
        );
        RegistrySql {
            read_one: format!(
                "SELECT n.ms, r.revision, r.document FROM (SELECT {now23} AS ms) n \
                 LEFT JOIN {s}.registrations r ON r.namespace = $1::text"
            ),
            read_all: format!(
                "SELECT document FROM {s}.registrations ORDER BY namespace COLLATE \"C\""
            ),
            insert: format!(
                "WITH w AS (INSERT INTO {s}.registrations (namespace, revision, document) \
                   VALUES ($1::text, $2::int8, $3::text) ON CONFLICT (namespace) DO NOTHING \
                   RETURNING 1), {keep} SELECT count(*)::int8 FROM w"
            ),
            update: format!(
                "WITH w AS (UPDATE {s}.registrations SET revision = $2::int8, document = $3::text \
                   WHERE namespace = $1::text AND revision = $6::int8 RETURNING 1), {keep} \
                 SELECT count(*)::int8 FROM w"
            ),
            component: format!("SELECT component FROM {s}.policy_components WHERE digest = $1"),
            setting: format!("SELECT value FROM {s}.settings WHERE name = $1"),
            set_setting: format!(
                "INSERT INTO {s}.settings (name, value) VALUES ($1, $2) \
                 ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value"
            ),
        }
    }

    /// Every statement, named (for the schema-interpolation test).
    #[cfg(test)]
    pub(in crate::postgres) fn statements(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("registry.read_one", self.read_one.as_str()),
            ("registry.read_all", self.read_all.as_str()),
            ("registry.insert", self.insert.as_str()),
            ("registry.update", self.update.as_str()),
            ("registry.component", self.component.as_str()),
            ("registry.setting", self.setting.as_str()),
            ("registry.set_setting", self.set_setting.as_str()),
        ]
    }
}
