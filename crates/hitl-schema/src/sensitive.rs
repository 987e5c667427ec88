//! Fields that ask for secrets. The MCP specification forbids asking for passwords,
//! API keys, access tokens or payment credentials in a form: such a question must send
//! the user to a page (URL mode) instead.

use crate::CannotAsk;

/// Field names (and titles) refused, compared ignoring case and the separators `_`,
/// `-`, `.` and spaces. Exact matches only, so `token_count` or `password_hint_shown`
/// pass.
pub const SENSITIVE_NAMES: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "passcode",
    "pin",
    "secret",
    "clientsecret",
    "secretkey",
    "privatekey",
    "apikey",
    "apisecret",
    "accesskey",
    "secretaccesskey",
    "token",
    "accesstoken",
    "refreshtoken",
    "authtoken",
    "bearertoken",
    "idtoken",
    "sessiontoken",
    "cardnumber",
    "creditcard",
    "creditcardnumber",
    "cvv",
    "cvc",
    "cardcvc",
    "securitycode",
    "iban",
];

fn normalized(text: &str) -> String {
    text.chars().filter(|c| !matches!(c, '_' | '-' | '.' | ' ')).flat_map(char::to_lowercase).collect()
}

/// Is `text` one of [`SENSITIVE_NAMES`]?
pub fn is_sensitive(text: &str) -> bool {
    let n = normalized(text);
    SENSITIVE_NAMES.contains(&n.as_str())
}

/// Refuses a field whose name or title asks for a secret.
pub(crate) fn check(name: &str, title: Option<&str>, pointer: &str) -> Result<(), CannotAsk> {
    let hit = if is_sensitive(name) { Some(name) } else { title.filter(|t| is_sensitive(t)) };
    match hit {
        Some(what) => Err(CannotAsk::at(
            pointer,
            format!(
                "the field {what:?} asks for a secret; passwords, API keys, access tokens and payment credentials \
                 must not be asked in a form: send the user to a page with url mode"
            ),
        )),
        None => Ok(()),
    }
}
