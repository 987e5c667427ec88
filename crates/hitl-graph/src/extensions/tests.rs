//! The type map: one value per type.

use super::Extensions;

#[test]
fn one_value_per_type() {
    #[derive(Debug, PartialEq)]
    struct Caps(&'static str);
    let mut extensions = Extensions::default();
    assert!(extensions.is_empty());
    assert_eq!(extensions.get::<Caps>(), None);
    extensions.insert(Caps("form"));
    extensions.insert(Caps("url"));
    extensions.insert(7_u32);
    assert_eq!(extensions.get::<Caps>(), Some(&Caps("url")), "the later replaces the earlier");
    assert_eq!(extensions.clone().get::<u32>(), Some(&7), "clones share the values");
    assert_eq!(extensions.get::<u64>(), None);
}

#[test]
fn a_shared_value_is_the_callers_own_not_a_copy() {
    let caps = std::sync::Arc::new(String::from("elicitation"));
    let mut extensions = Extensions::default();
    extensions.insert_shared(caps.clone());
    assert!(std::ptr::eq(extensions.get::<String>().unwrap(), &*caps), "the same value");
    extensions.insert(String::from("replaced"));
    assert_eq!(extensions.get::<String>().map(String::as_str), Some("replaced"), "one value per type still");
    assert_eq!(std::sync::Arc::strong_count(&caps), 1, "the replaced one let go");
}
