//! KV-cache geometry: how many bytes one token of context occupies, from a preset or a Hugging Face config.json.
//!
//! Standard attention stores a K and a V vector per layer and KV head; MLA models (DeepSeek-V2/V3) store one
//! compressed latent per layer (kv_lora_rank + qk_rope_head_dim elements) instead. The paged layout uses the
//! per-region split, so the geometry is kept, not just the product.

use crate::bail_usage;
use anyhow::{Context, Result};
use serde::Serialize;
use std::path::Path;

/// The KV-cache shape of one model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvGeometry {
    pub name: String,
    pub layers: u64,
    /// Standard attention: KV heads and head dimension. Zero for MLA.
    pub kv_heads: u64,
    pub head_dim: u64,
    /// MLA: elements of the compressed latent per layer (kv_lora_rank + qk_rope_head_dim). Zero otherwise.
    pub latent_dim: u64,
    pub dtype_bytes: u64,
}

impl KvGeometry {
    pub fn is_mla(&self) -> bool {
        self.latent_dim > 0
    }

    /// Separate regions per layer: K and V for standard attention, one latent for MLA.
    pub fn regions_per_layer(&self) -> u64 {
        if self.is_mla() {
            1
        } else {
            2
        }
    }

    /// Bytes of one token in one region of one layer.
    pub fn region_bytes_per_token(&self) -> u64 {
        if self.is_mla() {
            self.latent_dim * self.dtype_bytes
        } else {
            self.kv_heads * self.head_dim * self.dtype_bytes
        }
    }

    pub fn bytes_per_token(&self) -> u64 {
        self.layers * self.regions_per_layer() * self.region_bytes_per_token()
    }

    /// One line saying where the number came from, printed before a run.
    pub fn describe(&self) -> String {
        let shape = if self.is_mla() {
            format!("{} layers × MLA latent {} × {} B", self.layers, self.latent_dim, self.dtype_bytes)
        } else {
            format!(
                "{} layers × 2 (K,V) × {} KV heads × head dim {} × {} B",
                self.layers, self.kv_heads, self.head_dim, self.dtype_bytes
            )
        };
        format!("{}: {} B/token ({shape})", self.name, self.bytes_per_token())
    }
}

struct Preset {
    name: &'static str,
    layers: u64,
    kv_heads: u64,
    head_dim: u64,
    latent_dim: u64,
}

/// Built-in models (bf16 KV cache). Numbers from each model's published config.json.
const PRESETS: &[Preset] = &[
    Preset { name: "qwen3-30b-a3b", layers: 48, kv_heads: 4, head_dim: 128, latent_dim: 0 },
    Preset { name: "qwen3-8b", layers: 36, kv_heads: 8, head_dim: 128, latent_dim: 0 },
    Preset { name: "llama-3.1-8b", layers: 32, kv_heads: 8, head_dim: 128, latent_dim: 0 },
    Preset { name: "llama-3.1-70b", layers: 80, kv_heads: 8, head_dim: 128, latent_dim: 0 },
    // MLA: kv_lora_rank 512 + qk_rope_head_dim 64, one latent per layer.
    Preset { name: "deepseek-v3", layers: 61, kv_heads: 0, head_dim: 0, latent_dim: 576 },
];

pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.name).collect()
}

/// Look up a built-in model by name (case-insensitive).
pub fn preset(name: &str) -> Result<KvGeometry> {
    let p = PRESETS.iter().find(|p| p.name.eq_ignore_ascii_case(name)).ok_or_else(|| {
        crate::error::usage(format!(
            "--model {name:?}: unknown model; known: {} (or give --model-config path/config.json or --kv-bytes-per-token N)",
            preset_names().join(", ")
        ))
    })?;
    Ok(KvGeometry {
        name: p.name.to_string(),
        layers: p.layers,
        kv_heads: p.kv_heads,
        head_dim: p.head_dim,
        latent_dim: p.latent_dim,
        dtype_bytes: 2,
    })
}

/// Read a Hugging Face `config.json` (also the `text_config` of multimodal models).
pub fn from_config_file(path: &Path) -> Result<KvGeometry> {
    let text = super::input::read_text(path, "a config.json").context("--model-config")?;
    let name = path
        .parent()
        .and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    from_config_json(&text, &name).with_context(|| format!("--model-config {}", path.display()))
}

pub fn from_config_json(text: &str, name: &str) -> Result<KvGeometry> {
    let root: serde_json::Value =
        serde_json::from_str(text).map_err(|e| crate::error::usage(format!("not valid JSON: {e}")))?;
    let cfg = if root.get("num_hidden_layers").is_none() { root.get("text_config").unwrap_or(&root) } else { &root };
    let int = |key: &str| cfg.get(key).and_then(|v| v.as_u64());
    let Some(layers) = int("num_hidden_layers").filter(|&l| l > 0) else {
        bail_usage!("no positive \"num_hidden_layers\"; is this a transformer's config.json?");
    };
    let dtype = cfg.get("torch_dtype").or_else(|| cfg.get("dtype")).and_then(|v| v.as_str()).unwrap_or("bfloat16");
    let dtype_bytes = match dtype {
        "bfloat16" | "float16" | "half" => 2,
        "float32" | "float" => 4,
        d if d.starts_with("float8") => 1,
        d => bail_usage!("unknown \"torch_dtype\" {d:?}; expected bfloat16, float16, float32 or float8_*"),
    };
    if let (Some(rank), Some(rope)) = (int("kv_lora_rank"), int("qk_rope_head_dim")) {
        if rank + rope == 0 {
            bail_usage!("\"kv_lora_rank\" + \"qk_rope_head_dim\" is zero");
        }
        return Ok(KvGeometry {
            name: name.to_string(),
            layers,
            kv_heads: 0,
            head_dim: 0,
            latent_dim: rank + rope,
            dtype_bytes,
        });
    }
    let Some(heads) = int("num_attention_heads").filter(|&h| h > 0) else {
        bail_usage!("no positive \"num_attention_heads\"");
    };
    let kv_heads = int("num_key_value_heads").unwrap_or(heads);
    let head_dim = match int("head_dim") {
        Some(d) => d,
        None => match int("hidden_size") {
            Some(h) if h % heads == 0 => h / heads,
            _ => bail_usage!("no \"head_dim\" and no \"hidden_size\" divisible by \"num_attention_heads\""),
        },
    };
    if kv_heads == 0 || head_dim == 0 {
        bail_usage!("\"num_key_value_heads\" and \"head_dim\" must be positive");
    }
    Ok(KvGeometry { name: name.to_string(), layers, kv_heads, head_dim, latent_dim: 0, dtype_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_published_geometry() {
        assert_eq!(preset("qwen3-30b-a3b").unwrap().bytes_per_token(), 98_304);
        assert_eq!(preset("llama-3.1-8b").unwrap().bytes_per_token(), 131_072);
        assert_eq!(preset("llama-3.1-70b").unwrap().bytes_per_token(), 327_680);
        let ds = preset("deepseek-v3").unwrap();
        assert!(ds.is_mla());
        assert_eq!(ds.bytes_per_token(), 61 * 576 * 2);
        assert_eq!(ds.regions_per_layer(), 1);
        assert_eq!(preset("Qwen3-30B-A3B").unwrap().name, "qwen3-30b-a3b");
        // 1k tokens of the seed's model is 96 MiB.
        assert_eq!(1024 * preset("qwen3-30b-a3b").unwrap().bytes_per_token(), 96 << 20);
    }

    #[test]
    fn unknown_model_is_a_usage_error_listing_presets() {
        let e = preset("gpt-9").unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("qwen3-30b-a3b"));
    }

    #[test]
    fn reads_hf_configs() {
        let qwen = r#"{"num_hidden_layers":48,"num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,
                       "hidden_size":2048,"torch_dtype":"bfloat16"}"#;
        assert_eq!(from_config_json(qwen, "q").unwrap().bytes_per_token(), 98_304);
        // head_dim derived from hidden_size / heads; kv heads default to attention heads.
        let old = r#"{"num_hidden_layers":2,"num_attention_heads":4,"hidden_size":256,"torch_dtype":"float32"}"#;
        let g = from_config_json(old, "o").unwrap();
        assert_eq!((g.kv_heads, g.head_dim, g.dtype_bytes), (4, 64, 4));
        let mla = r#"{"num_hidden_layers":61,"num_attention_heads":128,"kv_lora_rank":512,"qk_rope_head_dim":64}"#;
        assert_eq!(from_config_json(mla, "d").unwrap().bytes_per_token(), 70_272);
        let vlm =
            r#"{"text_config":{"num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":2,"head_dim":64}}"#;
        assert_eq!(from_config_json(vlm, "v").unwrap().bytes_per_token(), 4 * 2 * 2 * 64 * 2);
    }

    #[test]
    fn malformed_configs_are_usage_errors() {
        for bad in [
            "not json",
            "{}",
            r#"{"num_hidden_layers":2}"#,
            r#"{"num_hidden_layers":2,"num_attention_heads":3,"hidden_size":10}"#,
            r#"{"num_hidden_layers":2,"num_attention_heads":2,"head_dim":2,"torch_dtype":"int4"}"#,
        ] {
            let e = from_config_json(bad, "x").unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}: {e}");
        }
    }
}
