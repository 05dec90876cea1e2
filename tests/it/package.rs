//! The Debian package (scripts/package-deb.sh) as an operator meets it: `dpkg -i` installs it,
//! `systemd-analyze verify` accepts its unit, the installed binary runs the shipped
//! configuration and takes syslog from util-linux `logger`, `man loghaul` shows the page, and
//! `dpkg -r` keeps the edited configuration (a conffile) until `dpkg -P`.
//!
//! It installs into this machine's root (the tests run as root on a disposable Debian 12) and
//! removes the package again at its end.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::harness::*;

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .env_remove("LOGHAUL_CONFIG")
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"))
}

fn ok(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Purges the package when the test ends, however it ends.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = run("dpkg", &["--purge", "loghaul"]);
    }
}

#[test]
fn the_debian_package_installs_runs_the_shipped_config_and_keeps_its_conffile() {
    assert_eq!(
        run("id", &["-u"]).stdout,
        b"0\n",
        "this test installs a package: run the suite as root (as CI does)"
    );
    let dir = tempfile::tempdir().expect("a temp dir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/package-deb.sh");
    let deb = ok(
        "bash",
        &[
            &script.display().to_string(),
            "--binary",
            BIN,
            "--out",
            &dir.path().display().to_string(),
        ],
    );
    let deb = deb.lines().last().expect("the package's path").to_owned();
    let contents = ok("dpkg-deb", &["--contents", &deb]);
    for path in [
        "./usr/bin/loghaul",
        "./etc/loghaul/loghaul.yaml",
        "./lib/systemd/system/loghaul.service",
        "./usr/share/man/man1/loghaul.1.gz",
        "./usr/share/bash-completion/completions/loghaul",
        "./usr/share/zsh/vendor-completions/_loghaul",
        "./usr/share/fish/vendor_completions.d/loghaul.fish",
    ] {
        assert!(
            contents.contains(path),
            "{path} in the package:\n{contents}"
        );
    }
    let _installed = Installed;
    ok("dpkg", &["-i", &deb]);
    assert!(ok("dpkg-query", &["-W", "-f=${Status}", "loghaul"]).contains("install ok installed"));

    // The unit as systemd reads it.
    ok(
        "systemd-analyze",
        &["verify", "/lib/systemd/system/loghaul.service"],
    );
    // The binary users run has no debug info, and says what it is.
    let sections = ok("readelf", &["-S", "-W", "/usr/bin/loghaul"]);
    for debug in [".debug_info", ".debug_line", ".debug_str"] {
        assert!(!sections.contains(debug), "{debug} shipped:\n{sections}");
    }
    let shipped = std::fs::metadata("/usr/bin/loghaul")
        .expect("installed")
        .len();
    let built = std::fs::metadata(BIN).expect("the built binary").len();
    assert!(shipped < built, "{shipped} bytes shipped, {built} built");
    let version = ok("/usr/bin/loghaul", &["--version"]);
    assert!(
        version.contains("commit ") && version.contains("linux"),
        "{version}"
    );

    // The shipped configuration: valid (as the unit's ExecStartPre checks it), and it runs:
    // util-linux logger's message lands in its output file.
    let validated = Command::new("/usr/bin/loghaul")
        .arg("validate")
        .env("LOGHAUL_CONFIG", "/etc/loghaul/loghaul.yaml")
        .output()
        .expect("run validate");
    assert!(validated.status.success(), "{validated:?}");
    let state = tempfile::tempdir().expect("a state dir");
    let mut child = Command::new("/usr/bin/loghaul")
        .arg("run")
        .env("LOGHAUL_CONFIG", "/etc/loghaul/loghaul.yaml")
        .current_dir(state.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(state.path().join("stderr")).expect("a log file"))
        .spawn()
        .expect("start the installed loghaul");
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(8686, "/health").map(|(s, _)| s) != Some(200) {
        assert!(
            Instant::now() < deadline && child.try_wait().expect("poll").is_none(),
            "the shipped configuration did not start: {}",
            std::fs::read_to_string(state.path().join("stderr")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    ok(
        "logger",
        &[
            "--tcp",
            "--server",
            "127.0.0.1",
            "--port",
            "5514",
            "--rfc3164",
            "-t",
            "pkgtest",
            "installed from the package",
        ],
    );
    let data = state.path().join("loghaul-data");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let found = std::fs::read_dir(&data).ok().is_some_and(|entries| {
            entries.flatten().any(|e| {
                std::fs::read_to_string(e.path())
                    .is_ok_and(|t| t.contains("installed from the package"))
            })
        });
        if found {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "logger's line never reached {}",
            data.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    ok("kill", &["-TERM", &child.id().to_string()]);
    let status = child.wait().expect("wait for loghaul");
    assert!(status.success(), "{status}");

    // The manual.
    let page = Command::new("man")
        .args(["-P", "cat", "loghaul"])
        .env("MANWIDTH", "100")
        .output()
        .expect("run man");
    let page = String::from_utf8_lossy(&page.stdout);
    assert!(
        page.contains("loghaul") && page.contains("SYNOPSIS"),
        "{page}"
    );

    // Removal keeps an edited conffile; purge removes it.
    let mut edited = std::fs::read_to_string("/etc/loghaul/loghaul.yaml").expect("the conffile");
    edited.push_str("# edited by the operator\n");
    std::fs::write("/etc/loghaul/loghaul.yaml", &edited).expect("edit the conffile");
    ok("dpkg", &["-r", "loghaul"]);
    assert!(!Path::new("/usr/bin/loghaul").exists(), "the binary goes");
    assert_eq!(
        std::fs::read_to_string("/etc/loghaul/loghaul.yaml")
            .ok()
            .as_deref(),
        Some(edited.as_str()),
        "the configuration stays"
    );
    ok("dpkg", &["-P", "loghaul"]);
    assert!(!Path::new("/etc/loghaul/loghaul.yaml").exists(), "purged");
}
