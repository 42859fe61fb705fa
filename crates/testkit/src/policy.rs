//! Policy files for tests, built instead of pasted: `[auth]`, `[[callers]]` and `[[grants]]` written the way a person writes them, anything else as TOML text in its place.

/// A policy file's text, section by section, in the order the calls add
/// them (after `[auth]`, which comes first when set):
///
/// ```
/// use toolmesh_testkit::policy::{Caller, PolicyBuilder};
/// let toml = PolicyBuilder::new()
///     .no_anonymous()
///     .caller(Caller::token("tok-agent", "support-bot").tenant("acme").roles(&["agent"]))
///     .grant("agents", &["agent"], &["acc_echo"])
///     .then("[approval]\napprover_roles = [\"approver\"]\n")
///     .build_toml();
/// assert!(toml.starts_with("\n[auth]\nallow_anonymous = false\n"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct PolicyBuilder {
    auth: Option<String>,
    sections: Vec<String>,
}

impl PolicyBuilder {
    /// A policy with no section yet (the file's defaults).
    pub fn new() -> PolicyBuilder {
        PolicyBuilder::default()
    }

    /// `[auth] allow_anonymous = false`: every caller must be known.
    pub fn no_anonymous(mut self) -> PolicyBuilder {
        self.auth = Some("[auth]\nallow_anonymous = false\n".to_owned());
        self
    }

    /// `[auth] allow_anonymous = true`, a caller with no credential being
    /// `principal` of `tenant` with `roles`.
    pub fn anonymous(mut self, principal: &str, tenant: &str, roles: &[&str]) -> PolicyBuilder {
        self.auth = Some(format!(
            "[auth]\nallow_anonymous = true\nanonymous = {{ principal = {}, tenant = {}, roles = {} }}\n",
            quoted(principal),
            quoted(tenant),
            list(roles)
        ));
        self
    }

    /// A `[[callers]]` entry.
    pub fn caller(mut self, caller: Caller) -> PolicyBuilder {
        self.sections.push(caller.toml());
        self
    }

    /// A `[[grants]]` entry named `name` letting `roles` (everyone when
    /// empty) list and call `tools` (patterns).
    pub fn grant(mut self, name: &str, roles: &[&str], tools: &[&str]) -> PolicyBuilder {
        let mut text = format!("[[grants]]\nname = {}\n", quoted(name));
        if !roles.is_empty() {
            text.push_str(&format!("roles = {}\n", list(roles)));
        }
        text.push_str(&format!("tools = {}\n", list(tools)));
        self.sections.push(text);
        self
    }

    /// TOML text as it stands, in its place among the sections (a grant
    /// with argument limits, `[approval]`, `[[issuers]]`, or keys that
    /// continue the table the previous text opened).
    pub fn then(mut self, toml: &str) -> PolicyBuilder {
        self.sections.push(toml.to_owned());
        self
    }

    /// The policy file's text.
    pub fn build_toml(&self) -> String {
        let mut text = String::new();
        for section in self.auth.iter().chain(&self.sections) {
            text.push('\n');
            text.push_str(section);
        }
        text
    }
}

/// A `[[callers]]` entry: how the caller is known (a bearer token, a client
/// certificate's name, or a JWT's issuer and subject) and who it is.
#[derive(Debug, Clone)]
pub struct Caller {
    credential: String,
    principal: String,
    tenant: Option<String>,
    roles: Vec<String>,
}

impl Caller {
    /// The caller presenting bearer `token`, known as `principal`.
    pub fn token(token: &str, principal: &str) -> Caller {
        Caller::known_by(format!("token = {}\n", quoted(token)), principal)
    }

    /// The caller whose client certificate names `tls_name`.
    pub fn tls_name(tls_name: &str, principal: &str) -> Caller {
        Caller::known_by(format!("tls_name = {}\n", quoted(tls_name)), principal)
    }

    /// The caller with a JWT of `issuer` for `subject`.
    pub fn subject(issuer: &str, subject: &str, principal: &str) -> Caller {
        Caller::known_by(
            format!(
                "issuer = {}\nsubject = {}\n",
                quoted(issuer),
                quoted(subject)
            ),
            principal,
        )
    }

    fn known_by(credential: String, principal: &str) -> Caller {
        Caller {
            credential,
            principal: principal.to_owned(),
            tenant: None,
            roles: Vec::new(),
        }
    }

    /// Its tenant (the policy's default when not set).
    pub fn tenant(mut self, tenant: &str) -> Caller {
        self.tenant = Some(tenant.to_owned());
        self
    }

    /// Its roles.
    pub fn roles(mut self, roles: &[&str]) -> Caller {
        self.roles = roles.iter().map(|r| (*r).to_owned()).collect();
        self
    }

    fn toml(&self) -> String {
        let mut text = format!(
            "[[callers]]\n{}principal = {}\n",
            self.credential,
            quoted(&self.principal)
        );
        if let Some(tenant) = &self.tenant {
            text.push_str(&format!("tenant = {}\n", quoted(tenant)));
        }
        let roles: Vec<&str> = self.roles.iter().map(String::as_str).collect();
        text.push_str(&format!("roles = {}\n", list(&roles)));
        text
    }
}

/// `value` as a TOML basic string.
fn quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `values` as a TOML array of strings.
fn list(values: &[&str]) -> String {
    let items: Vec<String> = values.iter().map(|v| quoted(v)).collect();
    format!("[{}]", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the builder writes is the text a person would have pasted.
    #[test]
    fn writes_the_policy_as_pasted() {
        let built = PolicyBuilder::new()
            .anonymous("anonymous", "dev", &["agent"])
            .caller(
                Caller::token("tok-agent", "support-bot")
                    .tenant("acme")
                    .roles(&["agent"]),
            )
            .caller(Caller::tls_name("mesh", "cert-agent").roles(&["executor"]))
            .caller(Caller::subject("https://idp", "sa", "dispatcher").roles(&["dispatcher"]))
            .grant("everyone: every tool", &[], &["*"])
            .grant("agents", &["agent"], &["acc_echo", "acc_charge"])
            .then("[approval]\napprover_roles = [\"approver\"]\n")
            .build_toml();
        assert_eq!(
            built,
            r#"
[auth]
allow_anonymous = true
anonymous = { principal = "anonymous", tenant = "dev", roles = ["agent"] }

[[callers]]
token = "tok-agent"
principal = "support-bot"
tenant = "acme"
roles = ["agent"]

[[callers]]
tls_name = "mesh"
principal = "cert-agent"
roles = ["executor"]

[[callers]]
issuer = "https://idp"
subject = "sa"
principal = "dispatcher"
roles = ["dispatcher"]

[[grants]]
name = "everyone: every tool"
tools = ["*"]

[[grants]]
name = "agents"
roles = ["agent"]
tools = ["acc_echo", "acc_charge"]

[approval]
approver_roles = ["approver"]
"#
        );
    }

    /// `[auth]` comes first whenever it is set, and strings are escaped.
    #[test]
    fn auth_first_and_strings_escaped() {
        let built = PolicyBuilder::new()
            .caller(Caller::token("a\"b\\c", "p"))
            .no_anonymous()
            .build_toml();
        assert_eq!(
            built,
            "\n[auth]\nallow_anonymous = false\n\n[[callers]]\ntoken = \"a\\\"b\\\\c\"\nprincipal = \"p\"\nroles = []\n"
        );
    }
}
