//! The model's parameter file: one JSON file per (machine, fabric, p-class) so that a probe runs
//! once per machine and fabric, not per job.
//!
//! Location: `$FABCOLL_MODEL_DIR`, else `$XDG_CACHE_HOME/fabcoll`, else `~/.cache/fabcoll`; name
//! `model-<hostname>-<fabric>-p<class>.json` (fabric `ofi:tcp` → `ofi-tcp`; class = p rounded up
//! to a power of two, since per-message costs on an oversubscribed node grow with p).
//!
//! ```json
//! { "format": "fabcoll-model", "version": 1, "fabcoll": "0.1.0",
//!   "created": "2026-11-22T14:00:00Z", "host": "node1", "fabric": "shm", "p_class": 4,
//!   "params": { "alpha": 2.1e-6, "beta": 1.2e-10, "gamma": 9e-11, "f_alpha": 1.1,
//!               "f_beta": 1.4, "copy_beta": 6e-11, "overhead": 3e-6 } }
//! ```
//!
//! The eager/rendezvous switch ([`ModelParams::rendezvous`]) is written beside `params`, as
//! `"rendezvous": { "eager_limit": 16384, "alpha": 2e-6 }`, so that builds that predate it in
//! `params` read the files; [`ModelFile::model`] puts it back.
//!
//! [`load`] tells a missing file (`Ok(None)`) from a corrupt one (`Err`): the caller warns and
//! probes again, never panics. [`save`] writes a temporary file and renames it, so a concurrent
//! reader never sees half a file.

use std::path::{Path, PathBuf};

use fabcoll_fabric::settings;
use serde::{Deserialize, Serialize};

use super::{explicit_file, model_err, ModelParams, Rendezvous};
use crate::error::Result;

/// The value of `format`.
pub const FORMAT_NAME: &str = "fabcoll-model";
/// The version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

/// A parameter file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFile {
    pub format: String,
    pub version: u32,
    /// fabcoll version that probed.
    pub fabcoll: String,
    /// RFC 3339 time of the probe.
    pub created: String,
    pub host: String,
    pub fabric: String,
    pub p_class: u32,
    /// The parameters without their rendezvous switch (kept in `rendezvous`).
    pub params: ModelParams,
    /// The eager/rendezvous switch, when the probe fitted one (absent in older files = none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendezvous: Option<Rendezvous>,
}

impl ModelFile {
    /// A file for parameters probed now.
    pub fn new(host: &str, fabric: &str, p: u32, params: ModelParams) -> ModelFile {
        let rendezvous = (!params.rendezvous.is_off()).then_some(params.rendezvous);
        ModelFile {
            format: FORMAT_NAME.into(),
            version: FORMAT_VERSION,
            fabcoll: env!("CARGO_PKG_VERSION").into(),
            created: rfc3339_now(),
            host: host.into(),
            fabric: fabric.into(),
            p_class: p_class(p),
            params: ModelParams { rendezvous: Rendezvous::OFF, ..params },
            rendezvous,
        }
    }

    /// The parameters with the file's rendezvous switch (else the one in `params`, if any).
    pub fn model(&self) -> ModelParams {
        ModelParams { rendezvous: self.rendezvous.unwrap_or(self.params.rendezvous), ..self.params }
    }

    /// Format, version and parameters valid.
    pub fn validate(&self) -> Result<()> {
        if self.format != FORMAT_NAME {
            return Err(model_err(format!("format is {:?}, expected {FORMAT_NAME:?}", self.format)));
        }
        if self.version != FORMAT_VERSION {
            return Err(model_err(format!("version {} (this build reads {FORMAT_VERSION})", self.version)));
        }
        Ok(self.model().validate()?)
    }
}

/// The directory of parameter files: `FABCOLL_MODEL_DIR`, else under `XDG_CACHE_HOME` or `HOME`
/// (`None` if none is set).
pub fn dir() -> Option<PathBuf> {
    let set = |v: Option<std::ffi::OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    settings::FABCOLL_MODEL_DIR
        .get()
        .ok()
        .flatten()
        .or_else(|| set(std::env::var_os("XDG_CACHE_HOME")).map(|d| d.join("fabcoll")))
        .or_else(|| set(std::env::var_os("HOME")).map(|h| h.join(".cache").join("fabcoll")))
}

/// p rounded up to a power of two.
pub fn p_class(p: u32) -> u32 {
    p.max(1).checked_next_power_of_two().unwrap_or(u32::MAX)
}

/// `model-<host>-<fabric>-p<class>.json` in `dir`.
pub fn path_in(dir: &Path, host: &str, fabric: &str, p: u32) -> PathBuf {
    let clean = |s: &str| -> String {
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '_' { c } else { '-' }).collect()
    };
    dir.join(format!("model-{}-{}-p{}.json", clean(host), clean(fabric), p_class(p)))
}

/// This machine's name (`/proc/sys/kernel/hostname`, `$HOSTNAME`, else `localhost`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Reads `path`: `Ok(None)` if there is no such file, `Err` if it cannot be read or is not a
/// valid parameter file.
pub fn load(path: &Path) -> Result<Option<ModelFile>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(model_err(format!("reading {}: {e}", path.display()))),
    };
    parse(&text).map(Some).map_err(|e| model_err(format!("{}: {}", path.display(), strip(&e))))
}

/// A parameter file's text, parsed and validated.
pub fn parse(text: &str) -> Result<ModelFile> {
    let f: ModelFile = serde_json::from_str(text).map_err(|e| model_err(format!("not a model file: {e}")))?;
    f.validate()?;
    Ok(f)
}

/// Parameters from an explicit file (`FABCOLL_MODEL`, `fabcoll model --model-file`): a
/// [`ModelFile`] (with its rendezvous switch) or a bare [`ModelParams`] object.
pub fn load_params(path: &Path) -> Result<ModelParams> {
    let text =
        std::fs::read_to_string(path).map_err(|e| model_err(format!("FABCOLL_MODEL {}: {e}", path.display())))?;
    parse_params(&text).map_err(|e| model_err(format!("{}: {}", path.display(), strip(&e))))
}

/// [`load_params`] on a file's text.
pub fn parse_params(text: &str) -> Result<ModelParams> {
    if let Ok(f) = serde_json::from_str::<ModelFile>(text) {
        f.validate()?;
        return Ok(f.model());
    }
    let p: ModelParams = serde_json::from_str(text)
        .map_err(|e| model_err(format!("neither a model file nor a parameter object: {e}")))?;
    p.validate()?;
    Ok(p)
}

/// An error's message without the "cost model:" its kind adds (a path goes in front of it).
fn strip(e: &crate::Error) -> String {
    match e {
        crate::Error::InvalidArgument { msg, .. } => msg.clone(),
        e => e.to_string(),
    }
}

/// The parameters stored for a job of `p` ranks on `fabric`: `FABCOLL_MODEL`, else this
/// machine's cache file (an error saying how to get them where there is none).
pub fn stored(fabric: &str, p: u32) -> Result<ModelParams> {
    if let Some(f) = explicit_file() {
        return load_params(&f);
    }
    let dir = dir().ok_or_else(|| model_err("no cache directory (set FABCOLL_MODEL_DIR or HOME)"))?;
    let path = path_in(&dir, &hostname(), fabric, p);
    load(&path)?.map(|f| f.model()).ok_or_else(|| {
        model_err(format!(
            "no model parameters: probe them (Communicator::load_or_probe_model, `fabcoll model`) or set \
             FABCOLL_MODEL; {} does not exist",
            path.display()
        ))
    })
}

/// Writes `file` to `path` (creating the directory) through a temporary file and a rename.
pub fn save(path: &Path, file: &ModelFile) -> Result<()> {
    let io = |what: &str, e: std::io::Error| model_err(format!("{what} {}: {e}", path.display()));
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| io("creating the directory of", e))?;
    }
    let text = serde_json::to_string_pretty(file).map_err(|e| model_err(format!("encoding the model: {e}")))?;
    let tmp = path.with_extension(format!("json.tmp{}", std::process::id()));
    std::fs::write(&tmp, text + "\n").map_err(|e| io("writing", e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("renaming into", e)
    })
}

/// The current UTC time as `YYYY-MM-DDThh:mm:ssZ`.
pub fn rfc3339_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// `secs` since the Unix epoch as `YYYY-MM-DDThh:mm:ssZ` (Hinnant's civil-from-days).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabcoll_collectives::Machine;

    fn params() -> ModelParams {
        ModelParams {
            copy_beta: 4e-11,
            overhead: 2e-6,
            step_cost: 1e-7,
            cores: 2,
            hot_alpha: 2e-7,
            hot_beta: 3e-11,
            gap: 0.3,
            cpu_sends: true,
            ..ModelParams::new(Machine { alpha: 1.5e-6, beta: 1e-10, gamma: 2e-10, f_alpha: 1.1, f_beta: 1.7 })
        }
    }

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fabcoll-model-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn round_trip_and_missing() {
        let d = tmpdir("rt");
        let path = path_in(&d, "node/1", "ofi:tcp", 3);
        assert!(path.ends_with("model-node-1-ofi-tcp-p4.json"), "{}", path.display());
        assert_eq!(load(&path).unwrap(), None);
        let f = ModelFile::new("node/1", "ofi:tcp", 3, params());
        assert_eq!(f.rendezvous, None);
        save(&path, &f).unwrap();
        assert_eq!(load(&path).unwrap(), Some(f.clone()));
        assert_eq!(load_params(&path).unwrap(), params());
        // A bare parameter object is accepted by FABCOLL_MODEL too.
        let bare = d.join("bare.json");
        std::fs::write(&bare, serde_json::to_string(&params()).unwrap()).unwrap();
        assert_eq!(load_params(&bare).unwrap(), params());
        // The rendezvous switch is written beside the parameters, not in them, and read back.
        let rdv = Rendezvous { eager_limit: 16384, alpha: 2e-6 };
        let with_rdv = ModelParams { rendezvous: rdv, ..params() };
        let f = ModelFile::new("node/1", "ofi:tcp", 3, with_rdv);
        save(&path, &f).unwrap();
        let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert!(json["params"].get("rendezvous").is_none(), "{json}");
        assert_eq!(json["rendezvous"]["eager_limit"], 16384, "{json}");
        assert_eq!(load_params(&path).unwrap(), with_rdv);
        assert_eq!(load(&path).unwrap().map(|f| f.model()), Some(with_rdv));
        // A bare object carries it (written only when set).
        std::fs::write(&bare, serde_json::to_string(&with_rdv).unwrap()).unwrap();
        assert_eq!(load_params(&bare).unwrap(), with_rdv);
        // Without a step cost, shared cores, a hot-destination cost, a gap, sends on the CPU and a
        // rendezvous switch, the parameters are written as before they existed (older builds
        // reading a shared cache directory deny unknown fields).
        let plain = ModelParams {
            copy_beta: params().copy_beta,
            overhead: params().overhead,
            ..ModelParams::new(params().machine())
        };
        let text = serde_json::to_string(&plain).unwrap();
        for field in ["step_cost", "cores", "hot_", "gap", "cpu_sends", "rendezvous", "network"] {
            assert!(!text.contains(field), "{field}: {text}");
        }
        assert_eq!(serde_json::from_str::<ModelParams>(&text).unwrap(), plain);
        // A network level (two-level model) is written when there is one, and read back.
        let two = plain.with_network(fabcoll_collectives::sim::Network { alpha: 5e-6, beta: 1e-9 });
        let text = serde_json::to_string(&two).unwrap();
        assert!(text.contains("\"network\""), "{text}");
        assert_eq!(serde_json::from_str::<ModelParams>(&text).unwrap(), two);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn files_of_earlier_builds_are_read() {
        // As `fabcoll model` wrote them before the simulator and the model shared their
        // parameters: the switch beside `params`, the later fields absent or written when set.
        let d = tmpdir("old");
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("model-node1-shm-p4.json");
        std::fs::write(
            &path,
            r#"{ "format": "fabcoll-model", "version": 1, "fabcoll": "0.1.0",
                 "created": "2026-11-22T14:00:00Z", "host": "node1", "fabric": "shm", "p_class": 4,
                 "params": { "alpha": 2.1e-6, "beta": 1.2e-10, "gamma": 9e-11, "f_alpha": 1.1,
                             "f_beta": 1.4, "copy_beta": 6e-11, "overhead": 3e-6, "gap": 0.3,
                             "cpu_sends": true },
                 "rendezvous": { "eager_limit": 16384, "alpha": 2e-6 } }"#,
        )
        .unwrap();
        let m = load_params(&path).unwrap();
        assert_eq!((m.alpha, m.overhead, m.gap, m.cpu_sends, m.cores), (2.1e-6, 3e-6, 0.3, true, 0));
        assert_eq!(m.rendezvous, Rendezvous { eager_limit: 16384, alpha: 2e-6 });
        // The oldest bare object: the five numbers only.
        std::fs::write(&path, r#"{"alpha":4e-6,"beta":3e-10,"gamma":6e-11,"f_alpha":1.0,"f_beta":1.0}"#).unwrap();
        let m = load_params(&path).unwrap();
        assert_eq!(
            m,
            ModelParams::new(fabcoll_collectives::Machine {
                alpha: 4e-6,
                beta: 3e-10,
                gamma: 6e-11,
                f_alpha: 1.0,
                f_beta: 1.0
            })
        );
        // Unknown fields are refused, as before.
        std::fs::write(&path, r#"{"alpha":4e-6,"beta":3e-10,"gamma":6e-11,"f_alpha":1.0,"f_beta":1.0,"delta":1}"#)
            .unwrap();
        assert!(load_params(&path).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn corrupt_files_are_errors_not_panics() {
        let d = tmpdir("bad");
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("m.json");
        let mut f = ModelFile::new("h", "shm", 2, params());
        for text in [
            "{ not json".to_string(),
            String::new(),
            serde_json::to_string(&ModelFile { version: 99, ..f.clone() }).unwrap(),
            serde_json::to_string(&ModelFile { format: "other".into(), ..f.clone() }).unwrap(),
        ] {
            std::fs::write(&path, text).unwrap();
            assert!(load(&path).is_err());
            assert!(load_params(&path).is_err());
        }
        f.params.alpha = -1.0;
        std::fs::write(&path, serde_json::to_string(&f).unwrap()).unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("alpha"));
        assert!(load_params(&d.join("nosuch.json")).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn dates_and_classes() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_000_000), "2026-11-18T11:06:40Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!((p_class(1), p_class(2), p_class(3), p_class(8), p_class(9)), (1, 2, 4, 8, 16));
    }
}
