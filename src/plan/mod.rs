//! What to run: sizes, model geometry, and the list of writes one transfer is made of.

pub mod input;
pub mod kv;
pub mod latency;
pub mod layout;
pub mod order;
pub mod paged;
pub mod sizes;
pub mod sweep_file;
pub mod text;
pub mod transport;
pub mod workload;

use crate::named::named_enum;
use anyhow::Result;
use paged::{Layout, PagedConfig, PagedPlan};
use serde::{Deserialize, Serialize};
pub use transport::{Knobs, TransportConfig, TransportKind};

/// The most cases one sweep may hold (a sweep file's cases, or the values of one `--sizes`/`--tokens` list): at a
/// few seconds each, already days of measuring; more is a typo in a list, refused before the cases are built.
pub const MAX_CASES: usize = 100_000;

/// One size to measure, with its token count when the user asked in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeCase {
    pub size_bytes: u64,
    pub tokens: Option<u64>,
    pub bytes_per_token: Option<u64>,
}

/// How the sender moves one transfer, agreed with the receiver before any buffer is allocated (the `Config`
/// message: the transport's name and its knobs as one object, then every transport's run knobs at the top).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// The transport and its own knobs.
    pub transport: TransportConfig,
    /// What every transport's run is made of (also the results' `config`, which flattens the same struct).
    #[serde(flatten)]
    pub knobs: RunKnobs,
    /// The block size is the transport's default (not the user's): clamping it to the transfer is not news.
    pub block_size_default: bool,
    /// The sender's memory kind (`host`, `pinned`, `gpu:N`), recorded for the results.
    pub src_mem: String,
    pub cases: Vec<SizeCase>,
    /// `--layout paged`; absent: contiguous.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paged: Option<PagedConfig>,
}

/// The settings every run has, whatever its transport: how writes are cut, how many reps, what is checked. One
/// struct, so the wire `Config` and the results' `config` cannot drift from the run configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunKnobs {
    pub block_size: u64,
    pub streams: u32,
    pub reps: u32,
    pub warmup: u32,
    pub verify: bool,
    /// Seed of the `--verify` pattern.
    pub seed: u64,
    pub hugepages: bool,
    /// Read counters around every rep on both ends (left out of the wire config at its default).
    #[serde(default, skip_serializing_if = "is_default_counters")]
    pub counters: CountersMode,
    /// Where each end binds its thread and buffers (left out of the wire config at its default).
    #[serde(default, skip_serializing_if = "is_default_numa")]
    pub numa: NumaMode,
    /// `--prepare`: a shell command the sender runs before every rep, outside the timed interval (the receiver
    /// never runs it; it travels in the config only to be recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare: Option<String>,
}

fn is_default_numa(n: &NumaMode) -> bool {
    *n == NumaMode::default()
}

/// `--numa auto|off|N`: bind each end's thread (and so its buffers, first touched there) to the CPUs of the NUMA
/// node of the device it moves bytes through (auto), to node N, or not at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(into = "String", try_from = "NumaText")]
pub enum NumaMode {
    #[default]
    Auto,
    Off,
    Node(u32),
}

impl std::fmt::Display for NumaMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NumaMode::Auto => f.write_str("auto"),
            NumaMode::Off => f.write_str("off"),
            NumaMode::Node(n) => write!(f, "{n}"),
        }
    }
}

impl std::str::FromStr for NumaMode {
    type Err = String;

    fn from_str(text: &str) -> Result<NumaMode, String> {
        match text.trim() {
            "auto" => Ok(NumaMode::Auto),
            "off" => Ok(NumaMode::Off),
            t => t.parse().map(NumaMode::Node).map_err(|_| "expected auto, off or a NUMA node number".into()),
        }
    }
}

impl From<NumaMode> for String {
    fn from(n: NumaMode) -> String {
        n.to_string()
    }
}

/// `--numa` as a file may write it: `"auto"`, `"off"`, `"1"` or `1`.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum NumaText {
    Node(u32),
    Text(String),
}

impl TryFrom<NumaText> for NumaMode {
    type Error = String;

    fn try_from(t: NumaText) -> Result<NumaMode, String> {
        match t {
            NumaText::Node(n) => Ok(NumaMode::Node(n)),
            NumaText::Text(s) => s.parse(),
        }
    }
}

fn is_default_counters(c: &CountersMode) -> bool {
    *c == CountersMode::default()
}

named_enum! {
    /// `--counters`: read counters around every rep (auto, full) or not at all.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum CountersMode {
        // Every source this host has for what the run uses that reading does not disturb: RDMA port, network
        // interface, process CPU time, the GPU's clocks and throttle reasons.
        #[default]
        Auto = "auto",
        // Also the GPU's NVLink byte counters per link, energy, PCIe replays and link state: reading NVLink's 36
        // per-link counters takes about 33 ms and delays the copy that follows by 60-100 us (measured on the 2xH200),
        // so only on request.
        Full = "full",
        // None: no reads between reps.
        Off = "off",
    }
}

impl RunConfig {
    pub fn max_size(&self) -> u64 {
        self.cases.iter().map(|c| c.size_bytes).max().unwrap_or(0)
    }

    /// Bytes each side allocates: the largest transfer, or the paged layout's pool.
    pub fn buffer_bytes(&self) -> u64 {
        match &self.paged {
            Some(p) => p.pool_bytes(),
            None => self.max_size(),
        }
    }

    /// Refuse (usage error) a configuration whose plans would be too large to hold: a contiguous transfer of more
    /// than [`paged::MAX_PIECES`] writes (`--block-size 1B` on 1 GiB asked for a 24 GiB write list), or a paged
    /// layout past its limits. Both ends call this before allocating anything.
    pub fn check_plan_limits(&self) -> anyhow::Result<()> {
        if let Some(p) = &self.paged {
            return p.validate(&self.cases);
        }
        let block = self.knobs.block_size.max(1);
        for c in &self.cases {
            let writes = c.size_bytes.div_ceil(block);
            if writes > paged::MAX_PIECES {
                crate::bail_usage!(
                    "--block-size {} on {} makes {writes} writes, above the limit of {}; raise --block-size",
                    sizes::format_size(block),
                    sizes::format_size(c.size_bytes),
                    paged::MAX_PIECES
                );
            }
        }
        Ok(())
    }

    /// Memory an end holds to plan the run's largest case, beside its buffer: the paged layout's piece, write and
    /// span lists (0 for the contiguous layout, whose receiver keeps no list and whose writes [`Self::check_plan_limits`]
    /// bounds). Call [`Self::check_plan_limits`] first.
    pub fn plan_bytes(&self) -> u64 {
        let Some(p) = &self.paged else { return 0 };
        self.cases.iter().filter_map(|c| c.tokens).map(|t| p.plan_bytes(t)).max().unwrap_or(0)
    }

    /// The layout the run moves: paged when it carries a paged configuration.
    pub fn layout(&self) -> Layout {
        if self.paged.is_some() {
            Layout::Paged
        } else {
            Layout::Contiguous
        }
    }
}

/// One write of a transfer: `len` bytes from the sender's buffer at `local_offset` to the receiver's region at
/// `remote_offset`. Contiguous and (later) paged layouts differ only in this list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    pub local_offset: u64,
    pub remote_offset: u64,
    pub len: u64,
}

/// The writes of one transfer.
#[derive(Debug, Clone)]
pub struct TransferPlan {
    pub size_bytes: u64,
    pub block_size: u64,
    pub writes: Vec<Write>,
    /// The pieces, when the layout is paged (`writes` then move them, possibly coalesced).
    pub paged: Option<PagedPlan>,
}

impl TransferPlan {
    /// A contiguous transfer of `size` bytes cut into blocks of `block_size` (the last one may be shorter).
    pub fn contiguous(size: u64, block_size: u64) -> TransferPlan {
        assert!(block_size > 0, "block size is validated before planning");
        let block_size = block_size.min(size);
        let writes = (0..size.div_ceil(block_size))
            .map(|i| {
                let off = i * block_size;
                Write { local_offset: off, remote_offset: off, len: block_size.min(size - off) }
            })
            .collect();
        TransferPlan { size_bytes: size, block_size, writes, paged: None }
    }

    /// The plan of one case of a run, in the run's layout. Both ends call this with the same configuration and get
    /// the same plan (the sender's test-only fault injection aside).
    pub fn for_case(cfg: &RunConfig, case: &SizeCase) -> Result<TransferPlan> {
        let Some(p) = &cfg.paged else { return Ok(TransferPlan::contiguous(case.size_bytes, cfg.knobs.block_size)) };
        p.validate(std::slice::from_ref(case))?;
        let plan = p.plan(cfg.knobs.seed, case.tokens.expect("validated: paged cases have tokens"));
        Ok(TransferPlan::of_paged(p, case.size_bytes, plan))
    }

    /// A paged transfer of `tokens` tokens whose blocks sit in the given slots of each side's pool
    /// ([`PagedConfig::plan_with_slots`]; the slots checked against `p` before).
    pub fn paged_with_slots(p: &PagedConfig, tokens: u64, src: &[u64], dst: &[u64]) -> TransferPlan {
        TransferPlan::of_paged(p, tokens * p.bytes_per_token(), p.plan_with_slots(tokens, src, dst))
    }

    fn of_paged(p: &PagedConfig, size_bytes: u64, plan: PagedPlan) -> TransferPlan {
        let writes = plan.writes(p.merge(), p.dest_fault());
        TransferPlan { size_bytes, block_size: plan.piece_bytes, writes, paged: Some(plan) }
    }

    /// The plan of a rep that RepStart names by case and size: its case's plan, or, in the contiguous layout, a
    /// transfer of that many bytes into the region's start (a replayed request, or a piece of one, sizes no case
    /// lists). The receiver checked the size against its buffer.
    pub fn for_rep(cfg: &RunConfig, case: usize, size_bytes: u64) -> Result<TransferPlan> {
        match cfg.cases.get(case).filter(|c| c.size_bytes == size_bytes) {
            Some(c) => TransferPlan::for_case(cfg, c),
            None if cfg.paged.is_none() => Ok(TransferPlan::contiguous(size_bytes, cfg.knobs.block_size)),
            None => anyhow::bail!(
                "RepStart names case {case} of {size_bytes} bytes, which is not in the agreed configuration"
            ),
        }
    }

    /// Pieces of the transfer: the paged pieces, or the contiguous blocks.
    pub fn pieces(&self) -> usize {
        self.paged.as_ref().map_or(self.writes.len(), |p| p.pieces.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_plan_covers_every_byte_once() {
        let p = TransferPlan::contiguous(10 << 20, 3 << 20);
        assert_eq!(p.writes.len(), 4);
        assert_eq!(p.writes.iter().map(|w| w.len).sum::<u64>(), 10 << 20);
        assert_eq!(p.writes[3], Write { local_offset: 9 << 20, remote_offset: 9 << 20, len: 1 << 20 });
        for pair in p.writes.windows(2) {
            assert_eq!(pair[0].remote_offset + pair[0].len, pair[1].remote_offset);
        }
    }

    #[test]
    fn block_larger_than_transfer_is_clamped() {
        let p = TransferPlan::contiguous(4096, 1 << 30);
        assert_eq!(p.block_size, 4096);
        assert_eq!(p.writes.len(), 1);
    }

    /// A verbs configuration with its knobs as JSON (this layer cannot name the verbs transport's type).
    fn verbs_knobs() -> TransportConfig {
        let knobs = r#"{"qps":8,"batch":4,"inflight":64,"signal_every":8,"mr_chunk":1073741824,"dst_mr_chunk":2097152,"reg_per_rep":true,"cq_mode":"event","ack_timeout":12,"max_sge":4}"#;
        TransportConfig::new("verbs".parse().unwrap(), serde_json::from_str(knobs).unwrap())
    }

    /// A full configuration as it travels to the receiver in `Config`.
    fn full_config() -> RunConfig {
        RunConfig {
            transport: verbs_knobs(),
            knobs: RunKnobs {
                block_size: 65536,
                streams: 2,
                reps: 5,
                warmup: 1,
                verify: true,
                seed: 7,
                hugepages: true,
                counters: Default::default(),
                numa: Default::default(),
                prepare: None,
            },
            block_size_default: false,
            src_mem: "gpu:1".into(),
            cases: vec![SizeCase { size_bytes: 1 << 20, tokens: Some(16), bytes_per_token: Some(65536) }],
            paged: Some(paged::PagedConfig {
                block_tokens: 16,
                pool_tokens: 64,
                layers: 2,
                regions_per_layer: 2,
                region_bytes_per_token: 16384,
                coalesce: true,
                dst_placement: paged::DstPlacement::Sequential,
                fault_swap_dests: false,
            }),
        }
    }

    const FULL_CONFIG_JSON: &str = r#"{"transport":{"name":"verbs","knobs":{"qps":8,"batch":4,"inflight":64,"signal_every":8,"mr_chunk":1073741824,"dst_mr_chunk":2097152,"reg_per_rep":true,"cq_mode":"event","ack_timeout":12,"max_sge":4}},"block_size":65536,"streams":2,"reps":5,"warmup":1,"verify":true,"seed":7,"hugepages":true,"block_size_default":false,"src_mem":"gpu:1","cases":[{"size_bytes":1048576,"tokens":16,"bytes_per_token":65536}],"paged":{"block_tokens":16,"pool_tokens":64,"layers":2,"regions_per_layer":2,"region_bytes_per_token":16384,"coalesce":true,"dst_placement":"sequential"}}"#;

    #[test]
    fn run_config_wire_json_is_pinned() {
        // The transport's name and its knobs as one object, in the order the transport wrote them.
        let cfg = full_config();
        assert_eq!(serde_json::to_string(&cfg).unwrap(), FULL_CONFIG_JSON);
        assert_eq!(serde_json::from_str::<RunConfig>(FULL_CONFIG_JSON).unwrap(), cfg);
        let mut tcp = full_config();
        tcp.transport = TransportConfig::new("tcp".parse().unwrap(), Default::default());
        tcp.paged = None;
        let json = serde_json::to_string(&tcp).unwrap();
        assert!(json.starts_with(r#"{"transport":{"name":"tcp","knobs":{}},"block_size":65536,"#), "{json}");
        assert!(!json.contains("paged"), "{json}");
        assert_eq!(serde_json::from_str::<RunConfig>(&json).unwrap(), tcp);
    }

    #[test]
    fn a_config_of_the_shape_before_transport_objects_is_not_read() {
        // Protocol 5's shape: the transport by name and its knobs at the top. Peers of that protocol are refused
        // at Hello (see `control::messages::PROTOCOL`); were one to get this far, its config would not parse.
        let old = r#"{"transport":"tcp","block_size":1048576,"streams":1,"reps":3,"warmup":0,"verify":false,"seed":1,"hugepages":false,"cases":[{"size_bytes":1048576,"tokens":null,"bytes_per_token":null}]}"#;
        assert!(serde_json::from_str::<RunConfig>(old).is_err());
    }

    #[test]
    fn run_config_without_a_layout_is_contiguous_and_the_fault_never_travels() {
        let g = crate::plan::kv::preset("qwen3-8b").unwrap();
        let paged = paged::PagedConfig {
            block_tokens: 16,
            pool_tokens: 64,
            layers: g.layers,
            regions_per_layer: 2,
            region_bytes_per_token: g.region_bytes_per_token(),
            coalesce: true,
            dst_placement: paged::DstPlacement::Random,
            fault_swap_dests: true,
        };
        let bpt = g.bytes_per_token();
        let mut cfg = RunConfig {
            transport: TransportConfig::new("tcp".parse().unwrap(), Default::default()),
            knobs: RunKnobs {
                block_size: 1 << 20,
                streams: 1,
                reps: 1,
                warmup: 0,
                verify: true,
                seed: 3,
                hugepages: false,
                counters: Default::default(),
                numa: Default::default(),
                prepare: None,
            },
            block_size_default: false,
            src_mem: "host".into(),
            cases: vec![SizeCase { size_bytes: 32 * bpt, tokens: Some(32), bytes_per_token: Some(bpt) }],
            paged: None,
        };
        let old = serde_json::to_value(&cfg).unwrap();
        assert!(old.get("paged").is_none(), "contiguous configs look as they did before layouts");
        let back: RunConfig = serde_json::from_value(old).unwrap();
        assert_eq!((back.paged.is_none(), back.layout(), back.buffer_bytes()), (true, Layout::Contiguous, 32 * bpt));
        cfg.paged = Some(paged);
        let text = serde_json::to_string(&cfg).unwrap();
        assert!(!text.contains("swap_dests"), "{text}");
        let back: RunConfig = serde_json::from_str(&text).unwrap();
        let p = back.paged.as_ref().unwrap();
        assert!(p.coalesce && !p.fault_swap_dests, "the receiver always plans true destinations");
        assert_eq!(back.buffer_bytes(), 64 * bpt);
        // The receiver's plan equals the sender's, except for the sender's injected fault.
        let (sender, receiver) = (
            TransferPlan::for_case(&cfg, &cfg.cases[0]).unwrap(),
            TransferPlan::for_case(&back, &back.cases[0]).unwrap(),
        );
        assert_eq!(sender.paged.as_ref().unwrap().pieces, receiver.paged.as_ref().unwrap().pieces);
        assert_ne!(sender.writes, receiver.writes);
        assert_eq!(receiver.block_size, 16 * g.region_bytes_per_token());
    }
}
