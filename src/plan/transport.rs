//! Which transport moves the bytes ([`TransportKind`]: the closed set, one arm per transport) and its own knobs as
//! a run configuration carries them ([`TransportConfig`]).
//!
//! The knobs' types live with their transports (`transport::verbs::VerbsConfig`, ...), above `plan` in the layer
//! order, so a configuration cannot name them: it holds the transport's kind and its knobs as the JSON object the
//! transport wrote ([`Fields`], in the order its type declares). A transport gets its own type back, checked, with
//! [`TransportConfig::knobs`] (`cfg.transport.knobs::<VerbsConfig>()?`), so its types stay strong where they are
//! used, while the wire `Config` and the results carry the object without knowing its keys. A trait object would
//! keep the type in memory too, but a receiver builds its configuration from the wire, where only the transport can
//! read the knobs back: the JSON form is the one both ends hold, so it is the one kept. The receiver checks the
//! knobs as soon as the configuration arrives (`transport::Transport::check_knobs`).

use crate::measure::Fields;
use crate::named::named_enum;
use anyhow::{anyhow, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

named_enum! {
    /// How bytes move (`--transport`; the command line's `auto` resolves to one of these before a run starts).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum TransportKind {
        Tcp = "tcp",
        Verbs = "verbs",
        Cuda = "cuda",
        Mooncake = "mooncake",
        Nixl = "nixl",
    }
}

/// A transport's own knobs (the general ones, such as `streams` and `block_size`, are [`super::RunKnobs`]'):
/// implemented by each transport's configuration type.
pub trait Knobs: Serialize + DeserializeOwned {
    /// The transport they belong to.
    const KIND: TransportKind;
}

/// Which transport a run uses, with that transport's own knobs. On the wire: `{"name": "verbs", "knobs": {...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransportConfig {
    #[serde(rename = "name")]
    kind: TransportKind,
    knobs: Fields,
}

impl TransportConfig {
    /// The configuration of `knobs`' transport.
    pub fn of<K: Knobs>(knobs: &K) -> TransportConfig {
        let knobs = Fields::of(knobs).expect("a transport's knobs serialize as a JSON object");
        TransportConfig { kind: K::KIND, knobs }
    }

    /// Transport `kind` with `knobs` as JSON (read from a file or a peer: its transport checks them).
    pub fn new(kind: TransportKind, knobs: Fields) -> TransportConfig {
        TransportConfig { kind, knobs }
    }

    pub fn kind(&self) -> TransportKind {
        self.kind
    }

    /// The knobs as their transport's own type.
    pub fn knobs<K: Knobs>(&self) -> Result<K> {
        if self.kind != K::KIND {
            return Err(anyhow!("a {} configuration holds no {} knobs", self.kind, K::KIND));
        }
        self.knobs.read().map_err(|e| anyhow!("the {} transport's knobs: {e}", self.kind))
    }

    /// The knobs as JSON.
    pub fn fields(&self) -> &Fields {
        &self.knobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::named::Named;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Probe {
        depth: u32,
        mode: String,
    }

    impl Knobs for Probe {
        // The first transport, whichever it is (this layer names none).
        const KIND: TransportKind = TransportKind::TABLE[0].0;
    }

    #[test]
    fn one_spelling_on_the_command_line_and_in_json() {
        for k in TransportKind::values() {
            assert_eq!(serde_json::to_value(k).unwrap().as_str(), Some(k.to_string().as_str()));
        }
        assert_eq!(TransportKind::NAMES.join(","), "tcp,verbs,cuda,mooncake,nixl");
    }

    #[test]
    fn knobs_come_back_as_their_own_type_and_travel_as_an_object() {
        let cfg = TransportConfig::of(&Probe { depth: 2, mode: "x".into() });
        let json = serde_json::to_string(&cfg).unwrap();
        assert_eq!(json, format!(r#"{{"name":"{}","knobs":{{"depth":2,"mode":"x"}}}}"#, Probe::KIND));
        let back: TransportConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, cfg);
        assert_eq!(back.knobs::<Probe>().unwrap(), Probe { depth: 2, mode: "x".into() });
        let wrong = TransportConfig::new(Probe::KIND, serde_json::from_str(r#"{"depth":"deep"}"#).unwrap());
        let e = wrong.knobs::<Probe>().unwrap_err().to_string();
        assert!(e.starts_with(&format!("the {} transport's knobs: invalid type", Probe::KIND)), "{e}");
        let second = TransportKind::TABLE[1].0;
        let other = TransportConfig::new(second, Fields::new());
        let e = format!("a {second} configuration holds no {} knobs", Probe::KIND);
        assert_eq!(other.knobs::<Probe>().unwrap_err().to_string(), e);
    }
}
