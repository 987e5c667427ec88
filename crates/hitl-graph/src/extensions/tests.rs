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
