use super::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Step {
    gather_ms: f64,
    copy_ms: f64,
    scatter_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Poll,
    Event,
    Other(String),
    Pair { a: u8, b: i64 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Rep {
    #[serde(skip_serializing_if = "Option::is_none")]
    reg_ms: Option<f64>,
    work_requests: Option<u64>,
    staged: Step,
    modes: Vec<Mode>,
    by_name: BTreeMap<String, i32>,
    flag: bool,
}

fn rep() -> Rep {
    Rep {
        reg_ms: None,
        work_requests: Some(7),
        staged: Step { gather_ms: 0.1 + 0.2, copy_ms: 15.450758115296395, scatter_ms: -0.0 },
        modes: vec![Mode::Poll, Mode::Other("x".into()), Mode::Pair { a: 1, b: -2 }],
        by_name: [("b".to_string(), 2), ("a".to_string(), 1)].into(),
        flag: true,
    }
}

#[test]
fn a_typed_value_keeps_its_field_order_and_its_floats() {
    let r = rep();
    let json = Json::of(&r).unwrap();
    // Written as serde_json writes the typed value itself, compact and pretty, byte for byte.
    assert_eq!(serde_json::to_string(&json).unwrap(), serde_json::to_string(&r).unwrap());
    assert_eq!(serde_json::to_string_pretty(&json).unwrap(), serde_json::to_string_pretty(&r).unwrap());
    assert_eq!(json.read::<Rep>().unwrap(), r, "and read back exactly");
    let Json::Object(fields) = &json else { panic!("{json:?}") };
    assert_eq!(fields.keys().collect::<Vec<_>>(), ["work_requests", "staged", "modes", "by_name", "flag"]);
}

#[test]
fn text_is_read_in_its_own_order_and_written_back_as_read() {
    let text = r#"{"z":1,"a":[{"y":null,"b":true}],"m":-3,"f":2.5,"s":"t"}"#;
    let fields: Fields = serde_json::from_str(text).unwrap();
    assert_eq!(fields.keys().collect::<Vec<_>>(), ["z", "a", "m", "f", "s"]);
    assert_eq!(serde_json::to_string(&fields).unwrap(), text);
    // A serde_json Value would have sorted them.
    let value: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_ne!(value.to_string(), text);
}

#[test]
fn fields_are_set_in_place_kept_or_dropped_by_key() {
    let mut f = Fields::of(&Step { gather_ms: 1.0, copy_ms: 2.0, scatter_ms: 3.0 }).unwrap();
    f.insert("copy_ms", Json::Null);
    f.insert("extra", Json::Bool(false));
    f.retain(|k| k != "gather_ms");
    assert_eq!(serde_json::to_string(&f).unwrap(), r#"{"copy_ms":null,"scatter_ms":3.0,"extra":false}"#);
    assert_eq!(f.get("scatter_ms"), Some(&Json::of(&3.0).unwrap()));
    assert!(Fields::of(&3).is_err(), "a number is no object");
    assert!(Fields::new().is_empty());
    assert!(Fields::of(&Step { gather_ms: 1.0, copy_ms: 2.0, scatter_ms: 3.0 }).unwrap().read::<Rep>().is_err());
}
