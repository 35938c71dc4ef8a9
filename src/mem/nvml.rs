//! NVML, loaded at run time (`libnvidia-ml.so.1`, through `nvml-wrapper-sys`'s loader): the per-GPU counters kvxfer
//! reads around each rep of a run with GPU memory. Without the library (no NVIDIA driver) there are none and the
//! run goes on. A missing function or a field the GPU does not support reads as absent, never as zero.
//!
//! Cumulative counters: NVLink data sent and received (KiB, summed over the links), PCIe replays, energy (mJ).
//! Gauges, read after the rep (names ending `_now`): SM and memory clocks, clock-throttle reasons (a bit mask), and
//! the PCIe link's generation and width.

use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlFieldValue_t, nvmlPciInfo_t, NvmlLib};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::sync::OnceLock;

/// nvml.h: NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX / _RX (KiB of payload, per link in scopeId), and the most links a
/// GPU has (18 on Hopper).
const FI_NVLINK_DATA_TX: u32 = 138;
const FI_NVLINK_DATA_RX: u32 = 139;
const MAX_LINKS: u32 = 18;
const SUCCESS: u32 = 0;
/// nvml.h's nvmlClockType_t and nvmlValueType_t values used here.
const CLOCK_SM: u32 = 1;
const CLOCK_MEM: u32 = 2;
const VALUE_ULL: u32 = 3;

struct Nvml {
    lib: NvmlLib,
}

// SAFETY: NVML's API is thread-safe; the loaded library and its function pointers are immutable after loading.
unsafe impl Sync for Nvml {}
// SAFETY: as above.
unsafe impl Send for Nvml {}

fn nvml() -> Option<&'static Nvml> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    NVML.get_or_init(|| {
        // SAFETY: loading the driver's NVML library runs its initializers, which have no preconditions.
        let lib = unsafe { NvmlLib::new("libnvidia-ml.so.1") }.ok()?;
        let init = lib.nvmlInit_v2.as_ref().ok()?;
        // SAFETY: nvmlInit_v2 takes no arguments.
        (unsafe { init() } == SUCCESS).then_some(Nvml { lib })
    })
    .as_ref()
}

/// NVML's handle of the GPU at PCI `bus_id`.
fn device(l: &NvmlLib, bus_id: &str) -> Option<nvmlDevice_t> {
    let id = CString::new(bus_id).ok()?;
    let mut dev: nvmlDevice_t = std::ptr::null_mut();
    let by_bus = l.nvmlDeviceGetHandleByPciBusId_v2.as_ref().ok()?;
    // SAFETY: `id` is NUL-terminated and `dev` a valid out-pointer.
    (unsafe { by_bus(id.as_ptr(), &mut dev) } == SUCCESS).then_some(dev)
}

/// The far end of each active NVLink of the GPU at PCI `bus_id`, as a PCI bus id (another GPU's, or an NVSwitch's),
/// one entry per active link (None where NVML could not say where it leads); empty without NVLink, None without
/// NVML or that GPU.
pub fn nvlink_remotes(bus_id: &str) -> Option<Vec<Option<String>>> {
    let l = &nvml()?.lib;
    let dev = device(l, bus_id)?;
    let state = l.nvmlDeviceGetNvLinkState.as_ref().ok()?;
    let remote = l.nvmlDeviceGetNvLinkRemotePciInfo_v2.as_ref().ok()?;
    let mut out = Vec::new();
    for link in 0..MAX_LINKS {
        let mut active = 0;
        // SAFETY: `dev` is a valid handle and `active` a live out-value; a link the GPU lacks returns an error.
        if unsafe { state(dev, link, &mut active) } != SUCCESS || active != 1 {
            continue;
        }
        // SAFETY: a plain C struct; all zeros is valid.
        let mut pci: nvmlPciInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `dev` is valid and `pci` a live out-struct NVML fills.
        let far = (unsafe { remote(dev, link, &mut pci) } == SUCCESS).then(|| {
            let bytes: Vec<u8> = pci.busId.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
            String::from_utf8_lossy(&bytes).to_string()
        });
        out.push(far);
    }
    Some(out)
}

/// The counters of the GPU at PCI `bus_id` (`0000:17:00.0`), or None without NVML or that GPU: clocks and throttle
/// reasons; `full`: also NVLink bytes per link, energy, PCIe replays and link state. Those are slow (36 field reads
/// of one value each: about 33 ms per GPU pair; energy about 5 ms; replays 0.4 ms) and the NVLink reads delay the
/// next GPU copy: on the 2xH200 a 1 MiB gpu:0 -> gpu:1 copy took 130 us right after them against 29 us after none
/// (96 MiB: 340 against 279); with replays and link state read too, a 1 MiB rep still took 17-22 us against 13 us
/// without counters. Counters read before a rep must not move the rep's own time, so these wait for `full`.
pub fn gpu_counters(bus_id: &str, full: bool) -> Option<BTreeMap<String, u64>> {
    let n = nvml()?;
    let l = &n.lib;
    let dev = device(l, bus_id)?;
    let mut out = BTreeMap::new();
    if let (true, Ok(get)) = (full, l.nvmlDeviceGetFieldValues.as_ref()) {
        // One call per link and counter. Both counters in one call with the all-links scope (UINT_MAX) corrupted
        // the heap on the 2xH200 (driver 580): in two runs of the GPU tests, 6 kvxfer processes died at exit with
        // "corrupted size vs. prev_size"; one value per call: none in three runs.
        for (field, name) in [(FI_NVLINK_DATA_TX, "nvlink_tx_kib"), (FI_NVLINK_DATA_RX, "nvlink_rx_kib")] {
            let mut total = None;
            for link in 0..MAX_LINKS {
                // SAFETY: a plain C struct; all zeros is valid.
                let mut v: [nvmlFieldValue_t; 1] = [unsafe { std::mem::zeroed() }];
                v[0].fieldId = field;
                v[0].scopeId = link;
                // SAFETY: one initialized request, as NVML is told; `dev` is valid.
                if unsafe { get(dev, 1, v.as_mut_ptr()) } == SUCCESS
                    && v[0].nvmlReturn == SUCCESS
                    && v[0].valueType == VALUE_ULL
                {
                    // SAFETY: valueType says the union holds the unsigned long long.
                    *total.get_or_insert(0u64) += unsafe { v[0].value.ullVal };
                }
            }
            if let Some(t) = total {
                out.insert(name.to_string(), t);
            }
        }
    }
    // The helpers below borrow `out`; the block ends that borrow before it is returned.
    {
        let mut u32_of = |name: &str, f: &dyn Fn(&mut u32) -> Option<u32>| {
            let mut v = 0u32;
            if f(&mut v) == Some(SUCCESS) {
                out.insert(name.to_string(), u64::from(v));
            }
        };
        // SAFETY: `dev` is a valid handle and the out-pointer points at a live u32.
        u32_of("sm_clock_mhz_now", &|v| Some(unsafe { (l.nvmlDeviceGetClockInfo.as_ref().ok()?)(dev, CLOCK_SM, v) }));
        // SAFETY: `dev` is a valid handle and the out-pointer points at a live u32.
        u32_of("mem_clock_mhz_now", &|v| Some(unsafe { (l.nvmlDeviceGetClockInfo.as_ref().ok()?)(dev, CLOCK_MEM, v) }));
        if full {
            u32_of("pcie_replay_count", &|v| {
                // SAFETY: `dev` is a valid handle and the out-pointer points at a live u32.
                Some(unsafe { (l.nvmlDeviceGetPcieReplayCounter.as_ref().ok()?)(dev, v) })
            });
            u32_of("pcie_gen_now", &|v| {
                // SAFETY: `dev` is a valid handle and the out-pointer points at a live u32.
                Some(unsafe { (l.nvmlDeviceGetCurrPcieLinkGeneration.as_ref().ok()?)(dev, v) })
            });
            // SAFETY: `dev` is a valid handle and the out-pointer points at a live u32.
            u32_of("pcie_width_now", &|v| Some(unsafe { (l.nvmlDeviceGetCurrPcieLinkWidth.as_ref().ok()?)(dev, v) }));
        }
        let mut u64_of = |name: &str, f: &dyn Fn(&mut u64) -> Option<u32>| {
            let mut v = 0u64;
            if f(&mut v) == Some(SUCCESS) {
                out.insert(name.to_string(), v);
            }
        };
        if full {
            // SAFETY: `dev` is a valid handle and the out-pointer points at a live u64.
            u64_of("energy_mj", &|v| Some(unsafe { (l.nvmlDeviceGetTotalEnergyConsumption.as_ref().ok()?)(dev, v) }));
        }
        u64_of("throttle_reasons_now", &|v| {
            // SAFETY: `dev` is a valid handle and the out-pointer points at a live u64.
            Some(unsafe { (l.nvmlDeviceGetCurrentClocksThrottleReasons.as_ref().ok()?)(dev, v) })
        });
    }
    Some(out)
}
