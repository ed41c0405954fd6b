//! One table of fabcoll's settings: every `FABCOLL_*` knob declared once — name, type, default,
//! meaning, the layer that reads it — as MPICH declares its CVARs, plus the variables of other
//! tools that fabcoll reads ([`CONVENTIONS`]).
//!
//! A knob is read through its [`Knob`] (`settings::FABCOLL_EAGER.get()`): the value code installed
//! process-wide ([`Settings::install`]) if there is one, else the environment's, else `None`, which
//! the reading layer turns into its default. A value that does not parse is a [`SettingError`]
//! naming the variable and what it expects; an empty value counts as unset. Code sets knobs by
//! filling a [`Settings`] (one `Option` per knob) and installing it before it opens communicators:
//! knobs marked [`Read::Once`] are read the first time they are needed and never again.
//!
//! ```
//! use fabcoll_fabric::settings::{Settings, FABCOLL_EAGER, FABCOLL_TIMEOUT};
//! let mut s = Settings { eager: Some(64 << 10), ..Settings::default() };
//! s.set("FABCOLL_TIMEOUT", "30")?; // as the environment would say it
//! s.install();
//! assert_eq!(FABCOLL_EAGER.get()?, Some(65536));
//! assert_eq!(FABCOLL_TIMEOUT.get()?, Some(std::time::Duration::from_secs(30)));
//! # Ok::<(), fabcoll_fabric::settings::SettingError>(())
//! ```

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::RwLock;
use std::time::Duration;

use crate::bootstrap::StoreAddr;
use crate::Backend;

/// The layer that reads a knob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// Rank, size and the store (`fabric::bootstrap`).
    Bootstrap,
    /// The fabric backends (`fabric::{tcp, ofi, copy}`).
    Fabric,
    /// The executor that runs schedules over an endpoint (`fabcoll::ExecConfig`).
    Executor,
    /// The algorithm choice (`fabcoll::select`).
    Selection,
    /// The communicator: which fabric, checked mode.
    Communicator,
    /// The command-line tools.
    Tools,
    /// `cargo build` (`fabric/build.rs`).
    Build,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Bootstrap => "bootstrap",
            Layer::Fabric => "fabric",
            Layer::Executor => "executor",
            Layer::Selection => "selection",
            Layer::Communicator => "communicator",
            Layer::Tools => "tools",
            Layer::Build => "build",
        })
    }
}

/// When a knob is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// Each time it is needed (a communicator, an endpoint or a connection opens).
    EachUse,
    /// Once per process, the first time it is needed; later changes are not seen.
    Once,
}

/// A value that is not what its knob expects.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?}: {expected}")]
pub struct SettingError {
    /// The variable.
    pub name: String,
    /// The value given.
    pub value: String,
    /// What the knob expects (or why the value was refused).
    pub expected: String,
}

impl From<SettingError> for crate::Error {
    fn from(e: SettingError) -> crate::Error {
        crate::Error::InvalidArgument(e.to_string())
    }
}

impl From<SettingError> for crate::bootstrap::BootstrapError {
    fn from(e: SettingError) -> crate::bootstrap::BootstrapError {
        crate::bootstrap::BootstrapError::Config(e.to_string())
    }
}

/// How values of one type of knob read and print.
trait Kind<T> {
    /// The type column of the table.
    const NAME: &'static str;
    /// What a value must look like.
    const EXPECTED: &'static str;
    /// The value of `s` (trimmed, not empty); `Err` says what was expected.
    fn parse(s: &str) -> Result<T, String>;
    /// `v` as a value of the variable.
    fn render(v: &T) -> String;
    /// `v` for people (a secret stays hidden).
    fn show(v: &T) -> String {
        Self::render(v)
    }
}

/// A byte count: an integer, optionally with a K, M or G suffix (KiB, MiB, GiB).
struct Bytes;
impl Kind<usize> for Bytes {
    const NAME: &'static str = "bytes";
    const EXPECTED: &'static str = "expected a byte count (an integer, optionally with K, M or G)";
    fn parse(s: &str) -> Result<usize, String> {
        let t = s.strip_suffix("iB").or_else(|| s.strip_suffix('B')).unwrap_or(s);
        let (digits, shift) = match t.chars().last() {
            Some('K' | 'k') => (&t[..t.len() - 1], 10),
            Some('M' | 'm') => (&t[..t.len() - 1], 20),
            Some('G' | 'g') => (&t[..t.len() - 1], 30),
            _ => (t, 0),
        };
        digits
            .trim()
            .parse::<usize>()
            .ok()
            .and_then(|v| v.checked_mul(1 << shift))
            .ok_or_else(|| Self::EXPECTED.to_string())
    }
    fn render(v: &usize) -> String {
        v.to_string()
    }
}

/// A non-negative integer.
struct Count;
impl<T: std::str::FromStr + fmt::Display> Kind<T> for Count {
    const NAME: &'static str = "count";
    const EXPECTED: &'static str = "expected a non-negative integer";
    fn parse(s: &str) -> Result<T, String> {
        s.parse().map_err(|_| <Self as Kind<T>>::EXPECTED.to_string())
    }
    fn render(v: &T) -> String {
        v.to_string()
    }
}

/// A TCP port.
struct Port;
impl Kind<u16> for Port {
    const NAME: &'static str = "port";
    const EXPECTED: &'static str = "expected a port number (0 to 65535)";
    fn parse(s: &str) -> Result<u16, String> {
        s.parse().map_err(|_| Self::EXPECTED.to_string())
    }
    fn render(v: &u16) -> String {
        v.to_string()
    }
}

/// A non-negative, finite number of `UNIT` (in seconds).
fn duration(s: &str, unit: f64, expected: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Duration::try_from_secs_f64(v * unit).map_err(|_| expected.to_string()),
        _ => Err(expected.to_string()),
    }
}

/// Seconds, fractions allowed.
struct Seconds;
impl Kind<Duration> for Seconds {
    const NAME: &'static str = "seconds";
    const EXPECTED: &'static str = "expected a non-negative number of seconds";
    fn parse(s: &str) -> Result<Duration, String> {
        duration(s, 1.0, Self::EXPECTED)
    }
    fn render(v: &Duration) -> String {
        v.as_secs_f64().to_string()
    }
}

/// Microseconds, fractions allowed.
struct Micros;
impl Kind<Duration> for Micros {
    const NAME: &'static str = "microseconds";
    const EXPECTED: &'static str = "expected a non-negative number of microseconds";
    fn parse(s: &str) -> Result<Duration, String> {
        duration(s, 1e-6, Self::EXPECTED)
    }
    fn render(v: &Duration) -> String {
        (v.as_secs_f64() * 1e6).to_string()
    }
}

/// On or off.
struct Bool;
impl Kind<bool> for Bool {
    const NAME: &'static str = "bool";
    const EXPECTED: &'static str = "expected 1 or 0 (true/false, yes/no, on/off)";
    fn parse(s: &str) -> Result<bool, String> {
        match s.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(Self::EXPECTED.to_string()),
        }
    }
    fn render(v: &bool) -> String {
        u8::from(*v).to_string()
    }
}

/// Any text.
struct Text;
impl Kind<String> for Text {
    const NAME: &'static str = "text";
    const EXPECTED: &'static str = "expected text";
    fn parse(s: &str) -> Result<String, String> {
        Ok(s.to_string())
    }
    fn render(v: &String) -> String {
        v.clone()
    }
}

/// Text that is never printed.
struct Secret;
impl Kind<String> for Secret {
    const NAME: &'static str = "secret";
    const EXPECTED: &'static str = "expected text";
    fn parse(s: &str) -> Result<String, String> {
        Ok(s.to_string())
    }
    fn render(v: &String) -> String {
        v.clone()
    }
    fn show(_: &String) -> String {
        "(set, not shown)".into()
    }
}

/// A file or directory.
struct Path;
impl Kind<PathBuf> for Path {
    const NAME: &'static str = "path";
    const EXPECTED: &'static str = "expected a path";
    fn parse(s: &str) -> Result<PathBuf, String> {
        Ok(PathBuf::from(s))
    }
    fn render(v: &PathBuf) -> String {
        v.display().to_string()
    }
}

/// A fabric name ([`Backend`]).
struct Fabric;
impl Kind<Backend> for Fabric {
    const NAME: &'static str = "fabric";
    const EXPECTED: &'static str = "expected local, shm, tcp, ofi or ofi:<provider>";
    fn parse(s: &str) -> Result<Backend, String> {
        s.parse().map_err(|_| Self::EXPECTED.to_string())
    }
    fn render(v: &Backend) -> String {
        v.to_string()
    }
}

/// The route between the ranks of one node in a job over several nodes (`FABCOLL_NODE_FABRIC`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeFabric {
    /// Node peers go over this node-local fabric (`shm` or `ofi:shm`).
    Fabric(Backend),
    /// No node-local route: every peer goes over the network fabric.
    Off,
}

impl Kind<NodeFabric> for NodeFabric {
    const NAME: &'static str = "shm|ofi:shm|off";
    const EXPECTED: &'static str = "expected shm, ofi:shm or off";
    fn parse(s: &str) -> Result<NodeFabric, String> {
        match s {
            "off" => Ok(NodeFabric::Off),
            "shm" => Ok(NodeFabric::Fabric(Backend::Shm)),
            "ofi:shm" => Ok(NodeFabric::Fabric(Backend::Ofi { provider: "shm".into() })),
            _ => Err(Self::EXPECTED.to_string()),
        }
    }
    fn render(v: &NodeFabric) -> String {
        match v {
            NodeFabric::Fabric(b) => b.to_string(),
            NodeFabric::Off => "off".into(),
        }
    }
}

/// The bootstrap store's address ([`StoreAddr`]).
struct Store;
impl Kind<StoreAddr> for Store {
    const NAME: &'static str = "store";
    const EXPECTED: &'static str = "expected tcp://host:port, host:port or file:///dir";
    fn parse(s: &str) -> Result<StoreAddr, String> {
        StoreAddr::parse(s).map_err(|_| Self::EXPECTED.to_string())
    }
    fn render(v: &StoreAddr) -> String {
        v.to_string()
    }
}

/// An IP address, optionally with a port (port 0 when it has none).
struct Address;
impl Kind<SocketAddr> for Address {
    const NAME: &'static str = "ip[:port]";
    const EXPECTED: &'static str = "expected an IP address or ip:port";
    fn parse(s: &str) -> Result<SocketAddr, String> {
        match s.parse::<IpAddr>() {
            Ok(ip) => Ok(SocketAddr::new(ip, 0)),
            Err(_) => s.parse::<SocketAddr>().map_err(|_| Self::EXPECTED.to_string()),
        }
    }
    fn render(v: &SocketAddr) -> String {
        v.to_string()
    }
}

/// What chooses the algorithm by default (`FABCOLL_SELECT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selection {
    /// The decisions: a tuning file or the embedded defaults.
    Table,
    /// The cost model's prediction.
    Model,
}

impl Kind<Selection> for Selection {
    const NAME: &'static str = "table|model";
    const EXPECTED: &'static str = "expected table or model";
    fn parse(s: &str) -> Result<Selection, String> {
        match s {
            "table" => Ok(Selection::Table),
            "model" => Ok(Selection::Model),
            _ => Err(Self::EXPECTED.to_string()),
        }
    }
    fn render(v: &Selection) -> String {
        match v {
            Selection::Table => "table",
            Selection::Model => "model",
        }
        .into()
    }
}

/// Who serves the TCP store (`FABCOLL_STORE_SERVER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreServer {
    /// Rank 0 of the job.
    Rank0,
    /// The launcher that started the ranks (fabrun).
    Launcher,
}

impl Kind<StoreServer> for StoreServer {
    const NAME: &'static str = "rank0|launcher";
    const EXPECTED: &'static str = "expected rank0 or launcher";
    fn parse(s: &str) -> Result<StoreServer, String> {
        match s {
            "rank0" => Ok(StoreServer::Rank0),
            "launcher" => Ok(StoreServer::Launcher),
            _ => Err(Self::EXPECTED.to_string()),
        }
    }
    fn render(v: &StoreServer) -> String {
        match v {
            StoreServer::Rank0 => "rank0",
            StoreServer::Launcher => "launcher",
        }
        .into()
    }
}

/// A lookup of variables by name (the environment, or a map in tests).
pub type Vars<'a> = &'a dyn Fn(&str) -> Option<String>;

/// One knob: its name, and how its value is found and parsed.
pub struct Knob<T: 'static> {
    /// The variable, e.g. `FABCOLL_EAGER`.
    pub name: &'static str,
    field: fn(&Settings) -> &Option<T>,
    parse: fn(&str) -> Result<T, String>,
}

impl<T: Clone> Knob<T> {
    /// The value in force: the installed one, else the environment's; `None`: unset (the reading
    /// layer's default).
    pub fn get(&self) -> Result<Option<T>, SettingError> {
        if let Some(v) = installed_with(|s| (self.field)(s).clone()) {
            return Ok(Some(v));
        }
        self.read(&env)
    }

    /// The value `var` gives (an empty one counts as unset), ignoring installed settings.
    pub fn read(&self, var: Vars<'_>) -> Result<Option<T>, SettingError> {
        let Some(raw) = var(self.name) else { return Ok(None) };
        let s = raw.trim();
        if s.is_empty() {
            return Ok(None);
        }
        (self.parse)(s).map(Some).map_err(|expected| SettingError { name: self.name.into(), value: raw, expected })
    }
}

/// One row of the table.
pub struct Entry {
    /// The variable.
    pub name: &'static str,
    /// Its type (`bytes`, `count`, `seconds`, `bool`, `text`, `path`, a choice, …).
    pub kind: &'static str,
    /// The default, as text (it may depend on the fabric).
    pub default: &'static str,
    /// The layer that reads it.
    pub layer: Layer,
    /// When it is read.
    pub read: Read,
    /// What it sets, in one line.
    pub meaning: &'static str,
    show: fn(Vars<'_>) -> Result<Option<String>, SettingError>,
    render_installed: fn(&Settings) -> Option<String>,
}

impl Entry {
    /// The value `var` gives this knob as people should see it (parsed, normalised; a secret
    /// hidden), `None` if unset.
    pub fn show(&self, var: Vars<'_>) -> Result<Option<String>, SettingError> {
        (self.show)(var)
    }
}

/// A variable of another tool (a launcher's convention, libfabric, the shell) or of the build
/// that fabcoll reads.
pub struct Convention {
    /// The variable.
    pub name: &'static str,
    /// The layer that reads it.
    pub layer: Layer,
    /// What fabcoll takes from it, in one line.
    pub meaning: &'static str,
}

macro_rules! settings {
    ($(
        $name:ident $field:ident: $ty:ty as $kind:ty, $layer:ident, $read:ident, $default:literal, $meaning:literal;
    )*) => {
        /// Every knob of the table, as code sets them: `None` is unset (the environment's value,
        /// else the default of the layer that reads it). A field is its variable's name in lower
        /// case without `FABCOLL_` and a unit suffix (`FABCOLL_SPIN_US`: `spin`, a duration);
        /// `FABCOLL_YIELD` is `yield_when_idle`.
        #[derive(Clone, Default, PartialEq)]
        pub struct Settings {
            $(
                #[doc = concat!("`", stringify!($name), "`: ", $meaning, " (default: ", $default, ").")]
                pub $field: Option<$ty>,
            )*
        }

        $(
            #[doc = concat!("`", stringify!($name), "`: ", $meaning, " (", stringify!($layer), "; default: ",
                $default, ").")]
            pub static $name: Knob<$ty> = Knob {
                name: stringify!($name),
                field: |s| &s.$field,
                parse: <$kind as Kind<$ty>>::parse,
            };
        )*

        /// The table: every knob, in declaration order.
        pub static TABLE: &[Entry] = &[$(
            Entry {
                name: stringify!($name),
                kind: <$kind as Kind<$ty>>::NAME,
                default: $default,
                layer: Layer::$layer,
                read: Read::$read,
                meaning: $meaning,
                show: |var| Ok($name.read(var)?.map(|v| <$kind as Kind<$ty>>::show(&v))),
                render_installed: |s| s.$field.as_ref().map(<$kind as Kind<$ty>>::render),
            },
        )*];

        impl Settings {
            /// Every knob `var` gives; the first value that does not parse is an error.
            pub fn from_vars(var: Vars<'_>) -> Result<Settings, SettingError> {
                Ok(Settings { $($field: $name.read(var)?,)* })
            }

            /// These settings where they are set, `under`'s elsewhere.
            fn or(self, under: Settings) -> Settings {
                Settings { $($field: self.$field.or(under.$field),)* }
            }

            /// Sets the knob named `name` (e.g. `FABCOLL_EAGER`) from text, as the environment
            /// would (an empty value unsets it).
            pub fn set(&mut self, name: &str, value: &str) -> Result<(), SettingError> {
                let given = |_: &str| Some(value.to_string());
                $(if name == stringify!($name) {
                    self.$field = $name.read(&given)?;
                    return Ok(());
                })*
                Err(SettingError {
                    name: name.into(),
                    value: value.into(),
                    expected: "not a fabcoll setting (see `fabcoll info --settings`)".into(),
                })
            }

            /// The knobs set here as (variable, value) pairs, e.g. for a child's environment.
            pub fn to_vars(&self) -> Vec<(&'static str, String)> {
                let mut v = Vec::new();
                $(if let Some(x) = &self.$field {
                    v.push((stringify!($name), <$kind as Kind<$ty>>::render(x)));
                })*
                v
            }
        }

        impl fmt::Debug for Settings {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut d = f.debug_struct("Settings");
                $(if let Some(x) = &self.$field {
                    d.field(stringify!($field), &<$kind as Kind<$ty>>::show(x));
                })*
                d.finish()
            }
        }
    };
}

// One line per knob: VARIABLE field: Rust type as kind, layer, when read, default, meaning.
settings! {
    FABCOLL_RANK rank: u32 as Count, Bootstrap, EachUse, "RANK, else SLURM_PROCID",
        "this process's rank in the job (fabrun sets it)";
    FABCOLL_SIZE size: u32 as Count, Bootstrap, EachUse, "WORLD_SIZE, else SLURM_NTASKS",
        "the number of ranks in the job";
    FABCOLL_LOCAL_RANK local_rank: u32 as Count, Bootstrap, EachUse, "LOCAL_RANK, else SLURM_LOCALID",
        "this process's rank among the job's processes on this node";
    FABCOLL_LOCAL_SIZE local_size: u32 as Count, Bootstrap, EachUse, "LOCAL_WORLD_SIZE, else SLURM_NTASKS_PER_NODE",
        "the number of the job's processes on this node";
    FABCOLL_STORE store: StoreAddr as Store, Bootstrap, EachUse, "MASTER_ADDR, port FABCOLL_STORE_PORT",
        "where the job's bootstrap store is: tcp://host:port, host:port or file:///shared/dir";
    FABCOLL_STORE_PORT store_port: u16 as Port, Bootstrap, EachUse, "MASTER_PORT + 1",
        "the port of the TCP store at MASTER_ADDR when FABCOLL_STORE is unset";
    FABCOLL_STORE_SERVER store_server: StoreServer as StoreServer, Bootstrap, EachUse, "rank0",
        "who serves the TCP store: rank 0, or the launcher (fabrun sets launcher)";
    FABCOLL_TOKEN token: String as Secret, Bootstrap, EachUse, "none: a TCP store refuses to start",
        "the job's secret, the same on every rank; the TCP store and tcp connections refuse peers that cannot prove it";
    FABCOLL_NODE node: String as Text, Bootstrap, EachUse, "the host name and boot id",
        "this rank's node: ranks with equal values share a node (fabrun --nodes sets it to emulate nodes)";
    FABCOLL_FABRIC fabric: Backend as Fabric, Communicator, EachUse,
        "shm when every rank is on this node, else tcp",
        "the fabric: shm, local, tcp (sockets), ofi:tcp, ofi:shm or ofi:PROVIDER";
    FABCOLL_NODE_FABRIC node_fabric: NodeFabric as NodeFabric, Communicator, EachUse,
        "shm when the job spans nodes and some node holds several ranks",
        "the route between ranks of one node when the job spans nodes (FABCOLL_FABRIC carries the rest); off: none";
    FABCOLL_CHECK check: bool as Bool, Communicator, EachUse, "0",
        "checked mode: ranks compare every call's operation, counts, root, datatype and op first";
    FABCOLL_ALGO algo: String as Text, Selection, Once, "the default selection",
        "force algorithms by name, e.g. allreduce:ring,bcast:binomial (names: fabcoll info)";
    FABCOLL_TUNING_FILE tuning_file: PathBuf as Path, Selection, Once, "the embedded decisions",
        "a decision file (fabcoll tune) that replaces the default choice for the operations it covers";
    FABCOLL_SELECT select: Selection as Selection, Selection, Once, "table",
        "model: choose algorithms by the cost model's prediction instead of the decisions";
    FABCOLL_MODEL model: PathBuf as Path, Selection, EachUse, "this machine's cache file, else a probe",
        "a cost-model parameter file to use instead of probing";
    FABCOLL_MODEL_DIR model_dir: PathBuf as Path, Selection, EachUse,
        "$XDG_CACHE_HOME/fabcoll, else ~/.cache/fabcoll",
        "the directory of the cost model's cached parameter files";
    FABCOLL_TIMEOUT timeout: Duration as Seconds, Executor, EachUse, "60",
        "how long a collective waits for peers before an error names the silent ones";
    FABCOLL_EAGER eager: usize as Bytes, Executor, EachUse,
        "8192 on node fabrics (65536 where up to 16 ranks outnumber the CPUs), 65536 on network fabrics",
        "messages up to this size go eager (copied through a slot), larger ones zero-copy";
    FABCOLL_SLOTS slots: usize as Count, Executor, EachUse,
        "16; on network fabrics 16 to 64 (as many as fit 16 MiB of rings)",
        "eager slots per pair of ranks";
    FABCOLL_MR_CACHE mr_cache: usize as Count, Executor, EachUse, "64",
        "registration cache entries for user buffers (0 = no cache)";
    FABCOLL_HUGE_PAGES huge_pages: usize as Count, Executor, EachUse, "8",
        "shm: a user buffer used in this many calls gets huge pages, which peers' copies fill faster (0 = never)";
    FABCOLL_STAGED_RECEIVE staged_receive: usize as Bytes, Executor, EachUse, "1048576",
        "shm: zero-copy messages up to this size into the program's own memory go through scratch (0 = never)";
    FABCOLL_SHARED_COPY shared_copy: usize as Bytes, Executor, EachUse, "262144",
        "shm: an idle receiver reads half of a message this large while the sender writes the rest (0 = never)";
    FABCOLL_PULL_REDUCE pull_reduce: usize as Bytes, Executor, EachUse, "65536",
        "shm: a receiver reduces a message this large straight out of the sender's buffer (0 = never)";
    FABCOLL_SPIN_US spin: Duration as Micros, Executor, EachUse, "250",
        "how long a waiting rank polls on shm and local before it sleeps on the doorbell";
    FABCOLL_YIELD yield_when_idle: bool as Bool, Executor, EachUse, "on when this node's ranks outnumber its CPUs",
        "force the oversubscribed wait policy (yield the core after 2 fruitless polls) on or off";
    FABCOLL_LOCAL_CPUS local_cpus: usize as Count, Executor, EachUse, "the union of the CPU sets of this machine's ranks",
        "the CPUs this node's ranks share (fabrun sets it when it pins ranks)";
    FABCOLL_MAILBOX mailbox: usize as Bytes, Executor, EachUse, "16384, the maximum",
        "shm, local: blocking calls with buffers up to this size go through shared-memory mailboxes (0 = off)";
    FABCOLL_STRAIGHT straight: bool as Bool, Executor, EachUse, "1",
        "calls whose messages all go eager run straight inside the call, without the engine's op";
    FABCOLL_PROGRESS progress: bool as Bool, Executor, EachUse, "1",
        "a thread per endpoint moves nonblocking calls the program leaves alone for 5 ms (0: only test/wait move them)";
    FABCOLL_TCP_ADDR tcp_addr: SocketAddr as Address, Fabric, EachUse,
        "the local address that routes to the store's host, else 127.0.0.1",
        "tcp: the address this rank listens on and publishes to its peers";
    FABCOLL_TCP_CONGESTION tcp_congestion: String as Text, Fabric, EachUse,
        "reno between ranks of one host, the system's to other hosts",
        "tcp and ofi's socket providers: the congestion control between ranks, or system";
    FABCOLL_STREAM_COPY stream_copy: usize as Bytes, Fabric, Once, "8388608 (8 MiB)",
        "copies of at least this size use streaming stores that bypass the cache (0 = never)";
    FABCOLL_OFI_PROVIDER ofi_provider: String as Text, Fabric, EachUse, "FI_PROVIDER, else libfabric's first choice",
        "ofi: the provider of an endpoint opened without one (an ofi:PROVIDER fabric names its own)";
    FABCOLL_OFI_NODE ofi_node: String as Text, Fabric, EachUse, "libfabric's choice",
        "ofi: the local address to bind (not on shm)";
    FABCOLL_OFI_DELIVERY_COMPLETE ofi_delivery_complete: bool as Bool, Fabric, EachUse, "0",
        "ofi: writes complete once the target processed them (costs a round trip per write)";
    FABCOLL_OFI_INJECT ofi_inject: bool as Bool, Fabric, EachUse, "1, except over ofi_rxm (tcp;ofi_rxm, verbs)",
        "ofi: writes up to the provider's inject size are injected (complete on return)";
    FABCOLL_OFI_PROBE ofi_probe: Duration as Seconds, Fabric, EachUse,
        "1 on network providers; 0 on shm and with delivery-complete",
        "ofi: idle time after which liveness probes go out, so a dead peer is named (0 = off)";
    FABCOLL_OFI_BUSY_US ofi_busy: Duration as Micros, Fabric, EachUse, "10000",
        "ofi: how long a blocking wait keeps polling after its last event before it sleeps";
    FABCOLL_OFI_SEGMENT ofi_segment: usize as Bytes, Fabric, EachUse,
        "whole transfers; 512 KiB where the system's congestion control stays",
        "ofi: the pieces a zero-copy transfer is written in (0 = the provider's largest message)";
}

/// The variables of other tools and of the build that fabcoll reads.
pub static CONVENTIONS: &[Convention] = &[
    Convention { name: "RANK", layer: Layer::Bootstrap, meaning: "torchrun: this process's rank" },
    Convention { name: "WORLD_SIZE", layer: Layer::Bootstrap, meaning: "torchrun: the number of ranks" },
    Convention { name: "LOCAL_RANK", layer: Layer::Bootstrap, meaning: "torchrun: the rank on this node" },
    Convention { name: "LOCAL_WORLD_SIZE", layer: Layer::Bootstrap, meaning: "torchrun: the ranks on this node" },
    Convention { name: "MASTER_ADDR", layer: Layer::Bootstrap, meaning: "torchrun: the host of the TCP store" },
    Convention {
        name: "MASTER_PORT",
        layer: Layer::Bootstrap,
        meaning: "torchrun: its own store's port; fabcoll's listens on the next one",
    },
    Convention {
        name: "OMPI_COMM_WORLD_RANK",
        layer: Layer::Bootstrap,
        meaning: "Open MPI's mpirun: this process's rank",
    },
    Convention {
        name: "OMPI_COMM_WORLD_SIZE",
        layer: Layer::Bootstrap,
        meaning: "Open MPI's mpirun: the number of ranks",
    },
    Convention {
        name: "OMPI_COMM_WORLD_LOCAL_RANK",
        layer: Layer::Bootstrap,
        meaning: "Open MPI's mpirun: the rank on this node",
    },
    Convention {
        name: "OMPI_COMM_WORLD_LOCAL_SIZE",
        layer: Layer::Bootstrap,
        meaning: "Open MPI's mpirun: the ranks on this node",
    },
    Convention {
        name: "PMI_RANK",
        layer: Layer::Bootstrap,
        meaning: "PMI launchers (Hydra mpiexec): this process's rank",
    },
    Convention {
        name: "PMI_SIZE",
        layer: Layer::Bootstrap,
        meaning: "PMI launchers (Hydra mpiexec): the number of ranks",
    },
    Convention { name: "MPI_LOCALRANKID", layer: Layer::Bootstrap, meaning: "Hydra mpiexec: the rank on this node" },
    Convention { name: "MPI_LOCALNRANKS", layer: Layer::Bootstrap, meaning: "Hydra mpiexec: the ranks on this node" },
    Convention { name: "SLURM_PROCID", layer: Layer::Bootstrap, meaning: "Slurm: this process's rank" },
    Convention { name: "SLURM_NTASKS", layer: Layer::Bootstrap, meaning: "Slurm: the number of ranks" },
    Convention { name: "SLURM_LOCALID", layer: Layer::Bootstrap, meaning: "Slurm: the rank on this node" },
    Convention { name: "SLURM_NTASKS_PER_NODE", layer: Layer::Bootstrap, meaning: "Slurm: the ranks on this node" },
    Convention {
        name: "SLURM_TASKS_PER_NODE",
        layer: Layer::Bootstrap,
        meaning: "Slurm: the tasks of each node (`2(x3),1`), with SLURM_NODEID when SLURM_NTASKS_PER_NODE is unset",
    },
    Convention { name: "SLURM_NODEID", layer: Layer::Bootstrap, meaning: "Slurm: this node's index in the job" },
    Convention {
        name: "FI_PROVIDER",
        layer: Layer::Fabric,
        meaning: "libfabric: the provider of an ofi endpoint opened without one",
    },
    Convention {
        name: "XDG_CACHE_HOME",
        layer: Layer::Selection,
        meaning: "where the cost model's cache lives (then HOME/.cache)",
    },
    Convention { name: "HOME", layer: Layer::Selection, meaning: "the cost model's cache under ~/.cache/fabcoll" },
    Convention {
        name: "HOSTNAME",
        layer: Layer::Selection,
        meaning: "this machine's name (node identity, cache file names), where /proc has none",
    },
    Convention {
        name: "RUST_LOG",
        layer: Layer::Tools,
        meaning: "what the CLIs print of the library's log (tracing levels; default warn)",
    },
    Convention {
        name: "FABCOLL_DISABLE_OFI",
        layer: Layer::Build,
        meaning: "1: build without the ofi backend (fabric/build.rs)",
    },
];

/// Settings code installed (see [`Settings::install`]).
static INSTALLED: RwLock<Option<Settings>> = RwLock::new(None);

/// `f` of the installed settings, if any are installed.
fn installed_with<R>(f: impl FnOnce(&Settings) -> Option<R>) -> Option<R> {
    INSTALLED.read().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(f)
}

/// The environment's value of `name` (lossy where it is not UTF-8).
fn env(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// The value of variable `name` as the readers see it: for a knob, the installed value written
/// as text, else the environment's; for any other name, the environment's. The lookup for code
/// that reads knobs and other tools' conventions together (the bootstrap).
pub fn var(name: &str) -> Option<String> {
    TABLE
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| installed_with(|s| (e.render_installed)(s)))
        .or_else(|| env(name))
}

impl Settings {
    /// Every knob the environment sets; the first value that does not parse is an error.
    pub fn from_env() -> Result<Settings, SettingError> {
        Settings::from_vars(&env)
    }

    /// What the readers see: the installed settings over the environment's.
    pub fn current() -> Result<Settings, SettingError> {
        let env = Settings::from_vars(&var)?;
        Ok(Settings::installed().or(env))
    }

    /// Makes these settings the process's: every reader takes a knob set here before the
    /// environment's. Install them before the first communicator; knobs read once per process
    /// ([`Read::Once`]) keep the value of their first read.
    pub fn install(self) {
        *INSTALLED.write().unwrap_or_else(|e| e.into_inner()) = Some(self);
    }

    /// The installed settings (all unset if none were installed).
    pub fn installed() -> Settings {
        installed_with(|s| Some(s.clone())).unwrap_or_default()
    }
}

/// The table as text, one line per knob: name, type, default, layer, meaning; then the other
/// tools' variables.
pub fn table_text() -> String {
    let knobs: Vec<[String; 5]> = TABLE
        .iter()
        .map(|e| [e.name.into(), e.kind.into(), e.default.into(), e.layer.to_string(), meaning(e)])
        .collect();
    let others: Vec<[String; 3]> =
        CONVENTIONS.iter().map(|c| [c.name.into(), c.layer.to_string(), c.meaning.into()]).collect();
    let mut s = columns(&[["variable", "type", "default", "layer", "meaning"].map(String::from)], &knobs);
    s += "\nRead by fabcoll, set by other tools or the build:\n";
    s += &columns(&[["variable", "layer", "meaning"].map(String::from)], &others);
    s
}

/// `head` and `rows` in columns padded to their widest cell (the last one unpadded).
fn columns<const N: usize>(head: &[[String; N]], rows: &[[String; N]]) -> String {
    let all: Vec<&[String; N]> = head.iter().chain(rows).collect();
    let widths: Vec<usize> = (0..N).map(|i| all.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    let mut s = String::new();
    for row in all {
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == N {
                s += cell;
            } else {
                s += &format!("{cell:<w$}  ", w = widths[i]);
            }
        }
        s += "\n";
    }
    s
}

/// The meaning of `e`, with a note when it is read once per process.
fn meaning(e: &Entry) -> String {
    match e.read {
        Read::Once => format!("{} (read once per process)", e.meaning),
        Read::EachUse => e.meaning.to_string(),
    }
}

/// `docs/settings.md`: the table for readers (`fabcoll info --settings --format markdown`).
pub fn markdown() -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace('<', "&lt;");
    let mut s = String::from(
        "# Settings\n\n\
         <!-- Generated by `fabcoll info --settings --format markdown` from fabric/src/settings.rs; \
         tests/settings.rs checks that it matches. -->\n\n\
         Every knob of fabcoll, from the environment or from code (`fabcoll::settings::Settings`, \
         installed with `Settings::install`; a value set in code wins). Unset knobs take the default of the \
         layer that reads them; an empty value counts as unset; a value that does not parse is an error \
         naming the variable. Bytes take K, M and G suffixes (KiB, MiB, GiB); bools take 1/0, true/false, \
         yes/no, on/off. `fabcoll info --settings` prints this table and the values set in its environment.\n\n\
         | variable | type | default | layer | meaning |\n|---|---|---|---|---|\n",
    );
    for e in TABLE {
        s += &format!(
            "| `{}` | {} | {} | {} | {} |\n",
            e.name,
            cell(e.kind),
            cell(e.default),
            e.layer,
            cell(&meaning(e))
        );
    }
    s += "\nRead by fabcoll, set by other tools or the build:\n\n| variable | layer | meaning |\n|---|---|---|\n";
    for c in CONVENTIONS {
        s += &format!("| `{}` | {} | {} |\n", c.name, c.layer, cell(c.meaning));
    }
    s
}

/// The knobs `var` sets, each with its value as people should see it or the error it gives.
pub fn set_in(var: Vars<'_>) -> Vec<(&'static str, Result<String, SettingError>)> {
    TABLE.iter().filter_map(|e| e.show(var).transpose().map(|r| (e.name, r))).collect()
}

/// [`set_in`] of the environment.
pub fn set_in_env() -> Vec<(&'static str, Result<String, SettingError>)> {
    set_in(&env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn values_parse_by_type() {
        let v = vars(&[
            ("FABCOLL_EAGER", "64K"),
            ("FABCOLL_MAILBOX", " 1024 "),
            ("FABCOLL_TIMEOUT", "0.5"),
            ("FABCOLL_SPIN_US", "20"),
            ("FABCOLL_CHECK", "yes"),
            ("FABCOLL_STRAIGHT", "0"),
            ("FABCOLL_FABRIC", "ofi:tcp"),
            ("FABCOLL_NODE_FABRIC", "off"),
            ("FABCOLL_STORE", "file:///tmp/x"),
            ("FABCOLL_TCP_ADDR", "10.0.0.2"),
            ("FABCOLL_SELECT", "model"),
            ("FABCOLL_STORE_SERVER", "launcher"),
            ("FABCOLL_SLOTS", ""),
        ]);
        let s = Settings::from_vars(&v).unwrap();
        assert_eq!(s.eager, Some(65536));
        assert_eq!(s.mailbox, Some(1024));
        assert_eq!(s.timeout, Some(Duration::from_millis(500)));
        assert_eq!(s.spin, Some(Duration::from_micros(20)));
        assert_eq!((s.check, s.straight), (Some(true), Some(false)));
        assert_eq!(s.fabric, Some(Backend::Ofi { provider: "tcp".into() }));
        assert_eq!(s.node_fabric, Some(NodeFabric::Off));
        assert_eq!(s.store, Some(StoreAddr::File("/tmp/x".into())));
        assert_eq!(s.tcp_addr, Some("10.0.0.2:0".parse().unwrap()));
        assert_eq!(s.select, Some(Selection::Model));
        assert_eq!(s.store_server, Some(StoreServer::Launcher));
        assert_eq!(s.slots, None, "an empty value is unset");
        assert_eq!(s.rank, None);
    }

    #[test]
    fn a_bad_value_names_the_variable_and_what_it_expects() {
        for (name, value, expected) in [
            ("FABCOLL_EAGER", "lots", "byte count"),
            ("FABCOLL_TIMEOUT", "-1", "seconds"),
            ("FABCOLL_CHECK", "maybe", "1 or 0"),
            ("FABCOLL_FABRIC", "mpi", "ofi:<provider>"),
            ("FABCOLL_TCP_ADDR", "eth0", "IP address"),
            ("FABCOLL_STORE_PORT", "70000", "port"),
            ("FABCOLL_SELECT", "fastest", "table or model"),
            ("FABCOLL_NODE_FABRIC", "tcp", "shm, ofi:shm or off"),
            ("FABCOLL_RANK", "-1", "non-negative integer"),
        ] {
            let e = Settings::from_vars(&vars(&[(name, value)])).unwrap_err();
            assert_eq!((e.name.as_str(), e.value.as_str()), (name, value));
            let text = e.to_string();
            assert!(text.starts_with(&format!("{name}={value:?}")) && text.contains(expected), "{text}");
        }
    }

    #[test]
    fn set_by_name_and_to_vars_round_trip() {
        let mut s = Settings::default();
        s.set("FABCOLL_EAGER", "16K").unwrap();
        s.set("FABCOLL_TOKEN", "secret").unwrap();
        s.set("FABCOLL_OFI_BUSY_US", "1500").unwrap();
        assert!(s.set("EAGER", "1").unwrap_err().to_string().contains("not a fabcoll setting"));
        assert!(s.set("FABCOLL_EAGER", "x").is_err());
        let pairs = s.to_vars();
        let back = Settings::from_vars(&|k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap();
        assert_eq!(back, s);
        assert!(!format!("{s:?}").contains("secret"), "Debug hides the token: {s:?}");
    }

    #[test]
    fn installed_settings_win_over_the_environment() {
        // FABCOLL_MODEL_DIR: no reader in this crate, so no other test sees the install.
        let dir = PathBuf::from("/nonexistent/fabcoll-settings-test");
        Settings { model_dir: Some(dir.clone()), ..Settings::default() }.install();
        assert_eq!(FABCOLL_MODEL_DIR.get().unwrap(), Some(dir.clone()));
        assert_eq!(var("FABCOLL_MODEL_DIR").as_deref(), Some("/nonexistent/fabcoll-settings-test"));
        assert_eq!(Settings::current().unwrap().model_dir, Some(dir));
        Settings::default().install();
        assert_eq!(Settings::installed(), Settings::default());
    }

    #[test]
    fn every_entry_has_a_type_a_default_and_a_one_line_meaning() {
        let mut names: Vec<&str> = TABLE.iter().map(|e| e.name).chain(CONVENTIONS.iter().map(|c| c.name)).collect();
        for e in TABLE {
            assert!(e.name.starts_with("FABCOLL_"), "{}", e.name);
            for (what, text) in [("type", e.kind), ("default", e.default), ("meaning", e.meaning)] {
                assert!(!text.trim().is_empty() && !text.contains('\n'), "{}: {what} {text:?}", e.name);
            }
            assert!(e.meaning.len() <= 110, "{}: the meaning is one short line", e.name);
        }
        for c in CONVENTIONS {
            assert!(!c.meaning.trim().is_empty() && !c.meaning.contains('\n'), "{}", c.name);
        }
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a variable is declared twice");
    }

    #[test]
    fn the_table_prints_one_line_per_variable() {
        let text = table_text();
        for e in TABLE {
            assert_eq!(text.lines().filter(|l| l.starts_with(&format!("{} ", e.name))).count(), 1, "{}", e.name);
        }
        let md = markdown();
        assert_eq!(md.lines().filter(|l| l.starts_with("| `")).count(), TABLE.len() + CONVENTIONS.len());
        assert!(md.contains("| `FABCOLL_SELECT` | table\\|model |"), "a | in a cell is escaped");
    }

    #[test]
    fn set_in_shows_values_parsed_and_hides_secrets() {
        let shown = set_in(&vars(&[("FABCOLL_EAGER", "1M"), ("FABCOLL_TOKEN", "t0k3n"), ("FABCOLL_CHECK", "?")]));
        let names: Vec<&str> = shown.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["FABCOLL_TOKEN", "FABCOLL_CHECK", "FABCOLL_EAGER"]);
        assert_eq!(shown[2].1.as_deref().unwrap(), "1048576");
        assert!(!shown[0].1.as_ref().unwrap().contains("t0k3n"));
        assert!(shown[1].1.is_err());
    }
}
