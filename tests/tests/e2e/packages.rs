//! The Debian packages (issue 26): `scripts/package` builds them from the release build, dpkg
//! installs them on this machine, `systemd-analyze verify` checks the installed units, the
//! installed daemons run the demo's flow as their own system users with the installed
//! configuration (started directly: systemd is not the init of a CI container), and C,
//! Fortran and MPI programs built with CMake against the installed libac-dev
//! (`find_package(ac)`, no paths given) run against them. Before that, both daemons' packages
//! are upgraded to a second, higher version built by `scripts/package --version`, with their
//! conffiles edited. Everything is purged at the end, whatever happens (the purge must leave
//! nothing of them in `/etc`), and the packages' system users deleted.
//!
//! Root only (dpkg); skipped, saying so, elsewhere, and failed where `AC_PACKAGES_REQUIRED` is
//! set (`scripts/test` sets it). It replaces packages of these names that are installed on the
//! machine (CI's is thrown away).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The packages `scripts/package` builds, in the order dpkg removes them.
const PACKAGES: [&str; 5] = ["ac-slurm", "libac-dev", "libac", "ac-backend", "arm-server"];
/// The system users the daemons' packages create (each package is named as its user).
const USERS: [&str; 2] = ["arm-server", "ac-backend"];
/// The daemons' configuration files, conffiles of the packages of the same names.
const CONFFILES: [(&str, &str); 2] =
    [("arm-server", "/etc/arm-server/arm-server.toml"), ("ac-backend", "/etc/ac-backend/ac-backend.toml")];
/// Appended to the workspace's version for the upgrade's packages: Debian orders `0.1.0+upgrade1`
/// after `0.1.0`.
const UPGRADE_SUFFIX: &str = "+upgrade1";
const NODE: &str = "pkg-node";

#[test]
fn packages_install_and_run_the_demo_flow() {
    if !is_root() {
        ac_tests::skip("AC_PACKAGES_REQUIRED", "installing Debian packages needs root");
        return;
    }
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("checkout").to_path_buf();
    let dir = tempfile::tempdir().expect("temp dir");
    let debs = dir.path().join("debs");

    let files = package(&checkout, &debs, None);
    let version = deb_field(&files[0], "Version");

    let mut installed = Installed::new();
    run(Command::new("dpkg").arg("--install").args(&files));
    installed.check_files();
    upgrade_keeps_edited_conffiles(&checkout, dir.path(), &version);
    let ctl = installed.start_daemons(dir.path());

    // The demo's flow: register the backend, programs built against the installed library.
    let backend_ca = "/var/lib/ac-backend/ca.pem";
    ctl.run(&["host", "add", &ctl.backend.addr, "--backend-ca", backend_ca, "--name", "pkg-host"]);
    let hosts: serde_json::Value = serde_json::from_str(&ctl.run(&["host", "list", "--json"])).expect("host list JSON");
    let accelerators = hosts["Hosts"][0]["accelerators"].as_array().map(Vec::len);
    assert_eq!(accelerators, Some(3), "the installed backend serves the three devices asked for: {hosts}");

    let programs = build_with_cmake(&checkout, dir.path());
    let ad_hoc = [("ARM_ACPN", "1".to_string())];
    // The packaged manager is closed to programs without a job; a site without a batch system
    // opens it in its configuration.
    let refused = ctl.failing_program(&programs.join("saxpy"), &ad_hoc);
    assert!(refused.contains("ad-hoc jobs are disabled"), "{refused}");
    let mut ctl = ctl;
    ctl.restart_arm_with(dir.path(), ("allow_ad_hoc = false", "allow_ad_hoc = true"));
    let out = ctl.program(&programs.join("saxpy"), &ad_hoc);
    assert!(out.contains("AC_Get(1): granted") && out.contains("saxpy: 1048576 elements OK"), "{out}");
    let out = ctl.program(&programs.join("saxpy_f"), &ad_hoc);
    assert!(out.contains("saxpy (Fortran): 1000000 elements OK"), "{out}");

    let submitted = ctl.run(&["job", "submit", "--job", "pkg-job", "--nodes", NODE, "--acpn", "1", "--user", "root"]);
    let job_env: Vec<(&str, String)> =
        ["ARM_JOB_ID", "ARM_JOB_CREDENTIAL"].into_iter().map(|k| (k, env_line(&submitted, k))).collect();
    let out = ctl.program(&programs.join("saxpy"), &job_env);
    assert!(out.contains("AC_Init: 1 static accelerator(s)") && out.contains("elements OK"), "{out}");
    let job: serde_json::Value =
        serde_json::from_str(&ctl.run(&["job", "show", "pkg-job", "--json"])).expect("job JSON");
    assert!(job.to_string().contains("pkg-job"), "{job}");
    ctl.run(&["job", "end", "pkg-job"]);

    let mut mpirun = Command::new("mpirun");
    mpirun.args(["-n", "2"]).arg(programs.join("mpi_saxpy"));
    for var in ["OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "OMPI_MCA_rmaps_base_oversubscribe"] {
        mpirun.env(var, "1");
    }
    let out = ctl.command(mpirun, &ad_hoc);
    assert_eq!(out.matches("of my own; saxpy OK on every rank").count(), 2, "{out}");

    ctl.stop();
    installed.purge();
}

/// `scripts/package` of the release build into `out`, at `version` (the workspace's when
/// `None`): the .debs, one of each of [`PACKAGES`].
fn package(checkout: &Path, out: &Path, version: Option<&str>) -> Vec<PathBuf> {
    let mut command = Command::new(checkout.join("scripts/package"));
    command.args(["--no-build", "--out"]).arg(out);
    if let Some(version) = version {
        command.args(["--version", version]);
    }
    let built = run(&mut command);
    let files: Vec<PathBuf> = built.lines().map(PathBuf::from).collect();
    let mut names: Vec<String> = files.iter().map(|f| deb_field(f, "Package")).collect();
    names.sort();
    let mut expected: Vec<String> = PACKAGES.iter().map(|p| p.to_string()).collect();
    expected.sort();
    assert_eq!(names, expected, "scripts/package built {built}");
    for file in &files {
        let packaged = deb_field(file, "Version");
        assert!(version.is_none_or(|v| v == packaged), "{} is version {packaged}, not {version:?}", file.display());
    }
    files
}

/// An upgrade of both daemons' packages, from `version` to a higher one built for it, keeps
/// the admin's edits of their conffiles (dpkg keeps an edited conffile whose packaged text is
/// unchanged, without asking) and runs the maintainer scripts' upgrade paths.
fn upgrade_keeps_edited_conffiles(checkout: &Path, dir: &Path, version: &str) {
    let newer = format!("{version}{UPGRADE_SUFFIX}");
    let higher = Command::new("dpkg").args(["--compare-versions", &newer, "gt", version]).status();
    assert!(higher.is_ok_and(|s| s.success()), "{newer} does not upgrade {version}");
    let debs = package(checkout, &dir.join("upgrade"), Some(&newer));
    let edit = "# edited by the site\n";
    for (_, conffile) in CONFFILES {
        let text = std::fs::read_to_string(conffile).expect("installed configuration");
        std::fs::write(conffile, format!("{text}{edit}")).expect("configuration edited");
    }
    let daemons: Vec<&PathBuf> = debs.iter().filter(|f| USERS.contains(&deb_field(f, "Package").as_str())).collect();
    assert_eq!(daemons.len(), USERS.len(), "the daemons' packages of {debs:?}");
    run(Command::new("dpkg").arg("--install").args(&daemons));
    for (package, conffile) in CONFFILES {
        let state = run(Command::new("dpkg-query").args(["--showformat=${Version} ${Status}", "--show", package]));
        assert_eq!(state, format!("{newer} install ok installed"), "{package} after the upgrade");
        let kept = std::fs::read_to_string(conffile).expect("configuration after the upgrade");
        assert!(kept.ends_with(edit), "the upgrade replaced the edited {conffile}:\n{kept}");
        let beside = std::fs::read_dir(Path::new(conffile).parent().expect("its directory"))
            .expect("configuration directory")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect::<Vec<_>>();
        assert_eq!(beside.len(), 1, "dpkg left other files beside {conffile}: {beside:?}");
    }
}

/// The packages installed by this test: purged on drop, with the users their postinst made.
struct Installed {
    purged: bool,
}

impl Installed {
    /// Removes what an earlier run (or anyone) left installed under these names.
    fn new() -> Self {
        remove_packages();
        Self { purged: false }
    }

    /// What dpkg put where, and what the maintainer scripts made.
    fn check_files(&self) {
        let multiarch = run(Command::new("dpkg-architecture").arg("-qDEB_HOST_MULTIARCH")).trim().to_string();
        for path in [
            "/usr/bin/arm-server".to_string(),
            "/usr/bin/armctl".into(),
            "/usr/bin/ac-backend".into(),
            format!("/usr/lib/{multiarch}/libac.so"),
            format!("/usr/lib/{multiarch}/libac.so.0"),
            "/usr/include/ac.h".into(),
            "/usr/include/ac.f90".into(),
            format!("/usr/lib/{multiarch}/cmake/ac/acConfig.cmake"),
            format!("/usr/lib/{multiarch}/pkgconfig/ac.pc"),
            format!("/usr/lib/{multiarch}/slurm-wlm/spank_ac.so"),
            "/usr/share/ac-slurm/job_submit.lua".into(),
            "/usr/lib/ac-backend/ac-backend-devices".into(),
        ] {
            assert!(Path::new(&path).exists(), "{path} is not installed");
        }
        // The configuration files are conffiles, kept across upgrades.
        for (package, conffile) in CONFFILES {
            let listed = run(Command::new("dpkg-query").args(["--showformat=${Conffiles}", "--show", package]));
            assert!(listed.contains(conffile), "{package}'s conffiles: {listed}");
        }
        // Every installed file as packaged (md5sums).
        let verify = run(Command::new("dpkg").arg("--verify").args(PACKAGES));
        assert_eq!(verify.trim(), "", "dpkg --verify");
        // The units as systemd reads them: no warning, no error.
        let units = ["/lib/systemd/system/arm-server.service", "/lib/systemd/system/ac-backend.service"];
        // The device bring-up runs as root, unsandboxed by design: verified, not rated.
        let devices = "/lib/systemd/system/ac-backend-devices.service";
        let verified = Command::new("systemd-analyze")
            .arg("verify")
            .args(units)
            .arg(devices)
            .output()
            .expect("systemd-analyze runs");
        let said = String::from_utf8_lossy(&verified.stderr).into_owned() + &String::from_utf8_lossy(&verified.stdout);
        assert!(verified.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");
        // Their hardening, as systemd rates it: an exposure of 2.0 or less (of 10) each.
        for unit in units {
            let rated = Command::new("systemd-analyze")
                .args(["security", "--offline=true", "--threshold=20", unit])
                .output()
                .expect("systemd-analyze runs");
            assert!(rated.status.success(), "{unit} is exposed: {}", String::from_utf8_lossy(&rated.stdout));
        }
        // libac's soname, which programs record, is the runtime package's; the linker's name
        // (libac.so) the development package's.
        let lib = format!("/usr/lib/{multiarch}/libac.so.0");
        let soname = run(Command::new("readelf").args(["-d", &lib]));
        assert!(soname.contains("Library soname: [libac.so.0]"), "{lib}: {soname}");
        let owner = |path: String| run(Command::new("dpkg").args(["-S", &path]));
        assert!(owner(lib.clone()).starts_with("libac:"), "{lib} is libac's");
        assert!(owner(format!("/usr/lib/{multiarch}/libac.so")).starts_with("libac-dev:"), "libac.so is libac-dev's");
        // The CUDA driver shim: libac's, answering to libcuda.so.1, and found only through
        // LD_LIBRARY_PATH (never the loader's cache: the node's NVIDIA driver stays the system's).
        let shim = format!("/usr/lib/{multiarch}/ac/cuda/libcuda.so.1");
        assert!(run(Command::new("readelf").args(["-d", &shim])).contains("Library soname: [libcuda.so.1]"), "{shim}");
        assert!(owner(shim.clone()).starts_with("libac:"), "{shim} is libac's");
        let libraries = ["libcublas.so.12", "libcublas.so.13", "libcublasLt.so.12", "libcublasLt.so.13"];
        for library in libraries.iter().chain(&["libcufft.so.11", "libcufft.so.12", "libnvidia-ml.so.1"]) {
            let link = format!("/usr/lib/{multiarch}/ac/cuda/{library}");
            assert_eq!(std::fs::read_link(&link).ok(), Some("libcuda.so.1".into()), "{link}");
            assert!(owner(link.clone()).starts_with("libac:"), "{link} is libac's");
        }
        assert!(!run(Command::new("ldconfig").arg("-p")).contains("/ac/cuda/"), "ldconfig's cache lists the CUDA shim");
        // An upgrade restarts ac-backend only once its sessions end (tests/tests/e2e/upgrade.rs runs
        // the script); arm-server at once.
        let postinst = |package: &str| std::fs::read_to_string(format!("/var/lib/dpkg/info/{package}.postinst"));
        let backend = postinst("ac-backend").expect("ac-backend's postinst");
        assert!(backend.contains("deb-systemd-invoke reload ac-backend.service"), "{backend}");
        let unit = std::fs::read_to_string("/lib/systemd/system/ac-backend.service").expect("unit");
        assert!(unit.contains("RestartForceExitStatus=75") && unit.contains("ExecReload="), "{unit}");
        // Each daemon's own user, and its state directory.
        for user in USERS {
            run(Command::new("id").arg(user));
            let state = format!("/var/lib/{user}");
            let owner = run(Command::new("stat").args(["--format=%U %a", &state]));
            assert_eq!(owner.trim(), format!("{user} 750"), "{state}");
        }
    }

    /// The manager and a backend, as their units run them but without systemd: their users,
    /// the installed configuration, the units' confinement; only the ports differ (free ones,
    /// announced in a file), and the backend serves three CPU devices (its configuration says `device = "auto"`,
    /// which finds no GPU here).
    fn start_daemons(&self, dir: &Path) -> Armctl {
        let arm = Daemon::start(dir, "arm-server", &[]);
        // The packaged backend serves nobody until the manager it names registers it.
        let key = Armctl::manager_key(&arm);
        assert_eq!(key.len(), 64, "armctl manager-key: {key}");
        let backend = Daemon::start(dir, "ac-backend", &["--devices", "0,1,2", "--arm-public-key", &key]);
        let state = Path::new("/var/lib/arm-server");
        for file in ["ca.pem", "admin.pem", "signing.key", "arm.redb"] {
            assert!(state.join(file).exists(), "the installed manager made no {file} in {}", state.display());
        }
        Armctl { arm, backend }
    }

    /// Purges the packages and checks that nothing of them is left.
    fn purge(&mut self) {
        self.purged = true;
        remove_packages();
        for path in [
            "/usr/bin/arm-server",
            "/usr/bin/armctl",
            "/usr/bin/ac-backend",
            "/etc/arm-server",
            "/etc/ac-backend",
            "/var/lib/arm-server",
            "/var/lib/ac-backend",
        ] {
            assert!(!Path::new(path).exists(), "{path} is left after the purge");
        }
    }
}

/// Purges the packages that are installed, and deletes their system users.
fn remove_packages() {
    let installed: Vec<&str> = PACKAGES
        .into_iter()
        .filter(|p| Command::new("dpkg-query").args(["--show", p]).output().is_ok_and(|o| o.status.success()))
        .collect();
    if !installed.is_empty() {
        run(Command::new("dpkg").arg("--purge").args(&installed));
    }
    for user in USERS {
        if Command::new("id").arg(user).output().is_ok_and(|o| o.status.success()) {
            run(Command::new("userdel").arg(user));
        }
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        if !self.purged {
            remove_packages();
        }
    }
}

/// An installed daemon started as its unit would start it.
struct Daemon {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Daemon {
    /// Starts `/usr/bin/<name>` as user `name` with `/etc/<name>/<name>.toml`, listening on a
    /// free loopback port, in the confinement its unit gives it, built here without systemd:
    /// a mount namespace where everything but its state directory is read-only
    /// (`ProtectSystem=strict`), `/tmp` its own (`PrivateTmp`), `/home` and `/root` empty
    /// (`ProtectHome`), no capabilities and no new privileges.
    fn start(dir: &Path, name: &str, extra: &[&str]) -> Self {
        let state = format!("/var/lib/{name}");
        let addr_file = format!("{state}/test.addr");
        let log = dir.join(format!("{name}.log"));
        let confine = "mount --bind \"$1\" \"$1\" && mount -o remount,bind,ro / \
            && mount -t tmpfs -o mode=1777 tmpfs /tmp && mount -t tmpfs tmpfs /home \
            && mount -t tmpfs tmpfs /root && shift && exec \"$@\"";
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", confine, "sh", &state])
            .args(["setpriv", &format!("--reuid={name}"), &format!("--regid={name}"), "--init-groups"])
            .args(["--no-new-privs", "--inh-caps=-all", "--bounding-set=-all"])
            .arg(format!("/usr/bin/{name}"))
            .args([
                "--config",
                &format!("/etc/{name}/{name}.toml"),
                "--listen",
                "127.0.0.1:0",
                "--addr-file",
                &addr_file,
            ])
            .args(extra)
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("{name} starts: {e}"));
        let mut daemon = Self { child, addr: String::new(), log };
        let start = Instant::now();
        while daemon.addr.is_empty() {
            if let Ok(text) = std::fs::read_to_string(&addr_file) {
                daemon.addr = text.trim().to_string();
            }
            let exited = daemon.child.try_wait().expect("wait");
            assert!(
                exited.is_none() && start.elapsed() < Duration::from_secs(10),
                "{name} did not start ({exited:?}): {}",
                ac_tests::tail(&daemon.log, 20)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        daemon
    }

    /// SIGTERM, as `systemctl stop` sends; an orderly exit.
    fn stop(mut self) {
        run(Command::new("kill").args(["-TERM", &self.child.id().to_string()]));
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "{} after SIGTERM: {}", status, ac_tests::tail(&self.log, 20));
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The installed `armctl` and programs, pointed at the installed manager.
struct Armctl {
    arm: Daemon,
    backend: Daemon,
}

impl Armctl {
    fn env(&self) -> [(&'static str, String); 5] {
        [
            ("ARM_ADDR", self.arm.addr.clone()),
            ("ARM_CA_CERT", "/var/lib/arm-server/ca.pem".into()),
            ("ARMCTL_CERT", "/var/lib/arm-server/admin.pem".into()),
            ("ARMCTL_KEY", "/var/lib/arm-server/admin.key".into()),
            ("ARM_NODE", NODE.into()),
        ]
    }

    /// The installed manager's public key, as `armctl manager-key` prints it (no certificate).
    fn manager_key(arm: &Daemon) -> String {
        let out = Command::new("/usr/bin/armctl")
            .args(["--arm", &arm.addr, "--ca", "/var/lib/arm-server/ca.pem", "manager-key"])
            .output()
            .expect("armctl runs");
        assert!(out.status.success(), "armctl manager-key: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Restarts the manager after replacing `edit.0` by `edit.1` in its configuration.
    fn restart_arm_with(&mut self, dir: &Path, edit: (&str, &str)) {
        let conffile = "/etc/arm-server/arm-server.toml";
        let text = std::fs::read_to_string(conffile).expect("installed configuration");
        assert!(text.contains(edit.0), "{conffile} has no `{}`:\n{text}", edit.0);
        std::fs::write(conffile, text.replace(edit.0, edit.1)).expect("configuration edited");
        // Stopped first: the new process opens the same store.
        let _ = self.arm.child.kill();
        let _ = self.arm.child.wait();
        let _ = std::fs::remove_file("/var/lib/arm-server/test.addr");
        self.arm = Daemon::start(dir, "arm-server", &[]);
    }

    /// Runs a program that must fail; what it said.
    fn failing_program(&self, path: &Path, env: &[(&str, String)]) -> String {
        let mut command = Command::new(path);
        command.env_remove("LD_LIBRARY_PATH").envs(self.env()).envs(env.iter().map(|(k, v)| (k, v)));
        let out = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
        assert!(!out.status.success(), "{command:?} succeeded");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    fn run(&self, args: &[&str]) -> String {
        let mut armctl = Command::new("/usr/bin/armctl");
        armctl.args(args);
        self.command(armctl, &[])
    }

    fn program(&self, path: &Path, env: &[(&str, String)]) -> String {
        self.command(Command::new(path), env)
    }

    fn command(&self, mut command: Command, env: &[(&str, String)]) -> String {
        // As a user runs them: cargo's test runners point LD_LIBRARY_PATH at target/.
        command.env_remove("LD_LIBRARY_PATH").envs(self.env()).envs(env.iter().map(|(k, v)| (k, v)));
        let out = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{command:?}: {}\n{text}\n{}", out.status, ac_tests::tail(&self.arm.log, 20));
        text
    }

    fn stop(self) {
        self.backend.stop();
        self.arm.stop();
    }
}

/// Builds the C, Fortran and MPI examples with CMake against the installed package; returns
/// the build directory. Each program must load the installed libac, by its soname.
fn build_with_cmake(checkout: &Path, dir: &Path) -> PathBuf {
    let build = dir.join("build");
    run(Command::new("cmake")
        .arg("-S")
        .arg(checkout.join("tests/fixtures/packages"))
        .arg("-B")
        .arg(&build)
        .arg(format!("-DAC_EXAMPLES={}", checkout.join("examples").display())));
    run(Command::new("cmake").arg("--build").arg(&build));
    let multiarch = run(Command::new("dpkg-architecture").arg("-qDEB_HOST_MULTIARCH")).trim().to_string();
    let installed = std::fs::canonicalize(format!("/usr/lib/{multiarch}/libac.so.0")).expect("installed libac.so.0");
    for program in ["saxpy", "saxpy_f", "mpi_saxpy"] {
        let ldd = run(Command::new("ldd").env_remove("LD_LIBRARY_PATH").arg(build.join(program)));
        let loaded = ldd
            .lines()
            .find_map(|l| l.trim().strip_prefix("libac.so.0 => "))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|path| std::fs::canonicalize(path).ok());
        assert_eq!(loaded.as_ref(), Some(&installed), "{program} loads {loaded:?}: {ldd}");
    }
    build
}

/// Runs a command to success; its standard output.
fn run(command: &mut Command) -> String {
    let out = command.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A control field of a .deb.
fn deb_field(deb: &Path, field: &str) -> String {
    run(Command::new("dpkg-deb").arg("--field").arg(deb).arg(field)).trim().to_string()
}

/// `KEY=value` from `armctl job submit`'s output.
fn env_line(text: &str, key: &str) -> String {
    let prefix = format!("{key}=");
    text.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {key} in {text}")).to_string()
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
