//! Postgres servers and PgBouncers a test owns: a fresh cluster (initdb) on a free port that the
//! test may stop, kill, restart, replicate or fill, and a PgBouncer in front of it, both removed
//! when dropped. The shared server on 5432 is never touched.
//!
//! Running as root (CI), the server programs run as the `postgres` user, as Debian's do.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use super::wait;

/// Why this machine cannot run a cluster test (no server binaries, no pgbouncer), if it can't.
pub fn missing(need_bouncer: bool) -> Option<String> {
    if bindir().is_none() {
        return Some("PostgreSQL's server programs (initdb, pg_ctl) are not installed".into());
    }
    if need_bouncer && !Path::new(BOUNCER).exists() {
        return Some(format!(
            "{BOUNCER} is missing (Debian's pgbouncer; .ci/test-deps)"
        ));
    }
    None
}

/// Skips the calling test (returns from it) unless it can start its own clusters (and, with
/// `bouncer`, PgBouncers).
#[macro_export]
macro_rules! require_cluster {
    () => {
        $crate::require_cluster!(false)
    };
    (bouncer) => {
        $crate::require_cluster!(true)
    };
    ($bouncer:expr) => {
        if let Some(why) = $crate::common::cluster::missing($bouncer) {
            $crate::common::skip(concat!(file!(), ":", line!()), &why);
            return;
        }
    };
}

const BOUNCER: &str = "/usr/sbin/pgbouncer";

/// How long `pg_ctl` may wait for a start, stop or promotion ([`wait::SETUP`]): a loaded
/// machine's start replays WAL and forks slowly, but finishes.
const PG_CTL_WAIT: &str = "180";

/// The newest installed server's programs (`/usr/lib/postgresql/<v>/bin`).
pub fn bindir() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name()?.to_str()?.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found.pop()
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `program args…`, as the `postgres` user when running as root; panics with its output on
/// failure.
fn run(program: &Path, args: &[&str]) -> String {
    let out = command(program, args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{} {args:?} failed: {text}",
        program.display()
    );
    text
}

fn command(program: &Path, args: &[&str]) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program).args(args);
        c
    } else {
        let mut c = Command::new(program);
        c.args(args);
        c
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A directory the `postgres` user owns, removed by [`Cluster`]/[`Bouncer`] on drop.
fn owned_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    std::fs::create_dir_all(&dir).expect("create cluster dir");
    if is_root() {
        let ok = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "chown {}", dir.display());
    }
    dir
}

/// One Postgres server of the test's own.
pub struct Cluster {
    pub port: u16,
    dir: PathBuf,
    data: PathBuf,
    bin: PathBuf,
    /// A filesystem mounted under `dir` for the data (unmounted on drop).
    mounted: Option<PathBuf>,
    /// The test's turn among those owning clusters (declared last: released after the stop).
    _turn: Turn,
}

/// How many tests own clusters at once. Starting one (initdb, a base backup, WAL replay) is
/// seconds of CPU, and what these tests check (a standby catching up, a lease expiring, a
/// pooler's reconnects) is timing; beside the rest of the suite on two cores, a few at a time
/// keeps them honest without serialising them.
const CLUSTER_TURNS: usize = 3;

/// One test's turn to own clusters, taken by its first cluster; the test's further clusters
/// (a standby, a second server) ride on it, so no test waits for itself.
struct Turn {
    thread: std::thread::ThreadId,
    holds_slot: bool,
}

/// Slots taken, and how many clusters each test thread holds.
static TURNS: Mutex<(usize, Option<HashMap<std::thread::ThreadId, usize>>)> = Mutex::new((0, None));
static TURN_FREED: Condvar = Condvar::new();

impl Turn {
    fn take() -> Turn {
        let thread = std::thread::current().id();
        let mut turns = TURNS.lock().unwrap();
        let held = turns
            .1
            .get_or_insert_with(HashMap::new)
            .entry(thread)
            .or_default();
        *held += 1;
        if *held > 1 {
            return Turn {
                thread,
                holds_slot: false,
            };
        }
        while turns.0 >= CLUSTER_TURNS {
            turns = TURN_FREED.wait(turns).unwrap();
        }
        turns.0 += 1;
        Turn {
            thread,
            holds_slot: true,
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut turns = TURNS.lock().unwrap();
        if let Some(held) = turns.1.as_mut().and_then(|m| m.get_mut(&self.thread)) {
            *held = held.saturating_sub(1);
        }
        if self.holds_slot {
            turns.0 -= 1;
            TURN_FREED.notify_one();
        }
    }
}

/// How a new cluster is set up.
#[derive(Default, Clone)]
pub struct Setup {
    /// Extra `postgresql.conf` lines.
    pub conf: Vec<String>,
    /// Put the data directory on a tmpfs of this many MiB (root only), with 1 MiB WAL
    /// segments so the WAL fits.
    pub tmpfs_mib: Option<u32>,
}

impl Cluster {
    /// A running server with default settings.
    pub fn start() -> Cluster {
        Cluster::with(Setup::default())
    }

    /// A running server set up as `setup` says.
    pub fn with(setup: Setup) -> Cluster {
        let turn = Turn::take();
        let bin = bindir().expect("PostgreSQL server programs");
        let dir = owned_dir("stead-pg");
        let mut mounted = None;
        let data = if let Some(mib) = setup.tmpfs_mib {
            let mnt = dir.join("mnt");
            std::fs::create_dir_all(&mnt).expect("mount point");
            let ok = Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
                .arg(&mnt)
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(ok, "mount a {mib} MiB tmpfs (needs root)");
            Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&mnt)
                .status()
                .expect("chown tmpfs");
            mounted = Some(mnt.clone());
            mnt.join("data")
        } else {
            dir.join("data")
        };
        let data_s = data.to_string_lossy().into_owned();
        let mut initdb = vec!["-D", &data_s, "-A", "trust", "-U", "postgres", "--no-sync"];
        if setup.tmpfs_mib.is_some() {
            initdb.push("--wal-segsize=1");
        }
        run(&bin.join("initdb"), &initdb);
        let port = free_port();
        let mut conf = vec![
            format!("port = {port}"),
            "listen_addresses = '127.0.0.1'".into(),
            format!("unix_socket_directories = '{}'", dir.display()),
            "max_connections = 100".into(),
            "shared_buffers = '32MB'".into(),
            "fsync = off".into(),
            "full_page_writes = off".into(),
            "wal_level = replica".into(),
            "max_wal_senders = 4".into(),
            "log_min_messages = warning".into(),
        ];
        conf.extend(setup.conf);
        append_conf(&data, &conf);
        let cluster = Cluster {
            port,
            dir,
            data,
            bin,
            mounted,
            _turn: turn,
        };
        cluster.start_again();
        cluster
    }

    /// The server's URL, without a database (as `STEAD_TEST_PG` is).
    pub fn server_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}", self.port)
    }

    /// The URL of database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        format!("{}/{db}", self.server_url())
    }

    fn pg_ctl(&self, args: &[&str]) -> String {
        let data = self.data.to_string_lossy().into_owned();
        let log = self.dir.join("log").to_string_lossy().into_owned();
        let mut all = vec!["-D", &data, "-l", &log];
        all.extend_from_slice(args);
        run(&self.bin.join("pg_ctl"), &all)
    }

    /// Starts the (stopped) server and waits until it accepts connections.
    pub fn start_again(&self) {
        self.pg_ctl(&["-w", "-t", PG_CTL_WAIT, "start"]);
    }

    /// Stops the server (fast: connections are closed, the shutdown is clean).
    pub fn stop(&self) {
        self.pg_ctl(&["-w", "-t", PG_CTL_WAIT, "-m", "fast", "stop"]);
    }

    /// Kills the postmaster with SIGKILL, as a crashed machine would lose it.
    pub fn kill(&self) {
        let pid = std::fs::read_to_string(self.data.join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().map(str::to_owned))
            .expect("postmaster.pid");
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
        // The children notice the postmaster's death and exit; wait for the port to close.
        wait::until("the killed server's port closing", || !self.accepting());
    }

    /// Whether something answers on the port.
    pub fn accepting(&self) -> bool {
        std::net::TcpStream::connect_timeout(
            &([127, 0, 0, 1], self.port).into(),
            Duration::from_millis(200),
        )
        .is_ok()
    }

    /// A streaming standby of this server (`pg_basebackup -R`), started; `name` is its
    /// `application_name`, which `synchronous_standby_names` can list.
    pub fn standby(&self, name: &str) -> Cluster {
        self.standby_through(name, self.port)
    }

    /// A standby as [`standby`](Cluster::standby) whose replication connection goes to
    /// `port` (a proxy in front of this server, which a test can cut to make it lag).
    pub fn standby_through(&self, name: &str, via: u16) -> Cluster {
        let dir = owned_dir("stead-standby");
        let data = dir.join("data");
        let data_s = data.to_string_lossy().into_owned();
        let port = self.port.to_string();
        run(
            &self.bin.join("pg_basebackup"),
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-D",
                &data_s,
                "-R",
                "-X",
                "stream",
                "--no-sync",
                "--checkpoint=fast",
            ],
        );
        let standby_port = free_port();
        append_conf(
            &data,
            &[
                format!("port = {standby_port}"),
                format!("unix_socket_directories = '{}'", dir.display()),
            ],
        );
        // After `-R`'s own line in postgresql.auto.conf, which overrides postgresql.conf.
        let auto = data.join("postgresql.auto.conf");
        let mut conf = std::fs::read_to_string(&auto).unwrap_or_default();
        conf.push_str(&format!(
            "primary_conninfo = 'host=127.0.0.1 port={via} user=postgres \
             application_name={name}'\n"
        ));
        std::fs::write(&auto, conf).expect("write postgresql.auto.conf");
        let standby = Cluster {
            port: standby_port,
            dir,
            data,
            bin: self.bin.clone(),
            mounted: None,
            _turn: Turn::take(),
        };
        standby.start_again();
        standby
    }

    /// Promotes this standby to a primary and waits until it accepts writes.
    pub fn promote(&self) {
        self.pg_ctl(&["-w", "-t", PG_CTL_WAIT, "promote"]);
    }

    /// The filesystem the data directory is on, when it is the test's own tmpfs.
    pub fn mount(&self) -> Option<&Path> {
        self.mounted.as_deref()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// Runs `sql` on database `db` with psql; its output.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let port = self.port.to_string();
        let psql = self.bin.join("psql");
        let psql = if psql.exists() {
            psql
        } else {
            PathBuf::from("/usr/bin/psql")
        };
        run(
            &psql,
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-d",
                db,
                "-XtAq",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ],
        )
    }

    /// Creates database `db`.
    pub fn create_db(&self, db: &str) {
        self.psql("postgres", &format!("CREATE DATABASE {db}"));
    }
}

fn append_conf(data: &Path, lines: &[String]) {
    let path = data.join("postgresql.conf");
    let mut conf = std::fs::read_to_string(&path).expect("postgresql.conf");
    for line in lines {
        conf.push_str(line);
        conf.push('\n');
    }
    std::fs::write(&path, conf).expect("write postgresql.conf");
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data.to_string_lossy().into_owned();
        let _ = command(
            &self.bin.join("pg_ctl"),
            &["-D", &data, "-m", "immediate", "-w", "stop"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
        if let Some(mnt) = &self.mounted {
            let _ = Command::new("umount").arg(mnt).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// PgBouncer's pool modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    Session,
    Transaction,
}

/// A PgBouncer on a free port in front of one server, trusting every user.
pub struct Bouncer {
    pub port: u16,
    dir: PathBuf,
    mode: PoolMode,
    pid: u32,
}

impl Bouncer {
    /// A bouncer for every database of the server on `server_port`, in `mode`, Debian's
    /// defaults otherwise (`default_pool_size` 20, no `ignore_startup_parameters`).
    pub fn start(server_port: u16, mode: PoolMode) -> Bouncer {
        let dir = owned_dir("stead-pgbouncer");
        let port = free_port();
        let mut bouncer = Bouncer {
            port,
            dir,
            mode,
            pid: 0,
        };
        bouncer.write_ini(server_port);
        let ini = bouncer.dir.join("pgbouncer.ini");
        run(Path::new(BOUNCER), &["-d", &ini.to_string_lossy()]);
        let pidfile = bouncer.dir.join("pgbouncer.pid");
        wait::until("pgbouncer writing its pid file", || {
            let pid = std::fs::read_to_string(&pidfile).ok();
            bouncer.pid = pid.and_then(|p| p.trim().parse().ok()).unwrap_or(0);
            bouncer.pid != 0
        });
        wait::until("pgbouncer accepting connections", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        bouncer
    }

    fn write_ini(&self, server_port: u16) {
        let mode = match self.mode {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        };
        let d = self.dir.display();
        let ini = format!(
            "[databases]\n* = host=127.0.0.1 port={server_port}\n\n[pgbouncer]\n\
             listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
             auth_type = trust\nauth_file = {d}/users.txt\npool_mode = {mode}\n\
             max_client_conn = 500\ndefault_pool_size = 20\nlogfile = {d}/pgbouncer.log\n\
             pidfile = {d}/pgbouncer.pid\nadmin_users = postgres\n\
             server_login_retry = 1\n",
            port = self.port
        );
        std::fs::write(self.dir.join("users.txt"), "\"postgres\" \"\"\n").expect("users.txt");
        std::fs::write(self.dir.join("pgbouncer.ini"), ini).expect("pgbouncer.ini");
    }

    /// The URL of database `db` through this bouncer.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Points the bouncer at another server (after a failover), as an operator would: a new
    /// config and a reload; its server connections to the old one are closed.
    pub fn repoint(&self, server_port: u16) {
        self.write_ini(server_port);
        let _ = Command::new("kill")
            .args(["-HUP", &self.pid.to_string()])
            .status();
    }

    /// PgBouncer's own log, for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
