//! `loghaul top` in a real terminal (tmux), driven as a person would: it shows every component
//! with live rates while load runs, and `q` gives the terminal back.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::*;

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(args)
        .output()
        .expect("run tmux (scripts/install-peers.sh installs it)");
    assert!(
        out.status.success(),
        "tmux {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A tmux session with a plain shell, killed when dropped.
struct Pane(String);

impl Pane {
    fn new(name: String) -> Pane {
        tmux(&[
            "new-session",
            "-d",
            "-s",
            &name,
            "-x",
            "180",
            "-y",
            "30",
            "bash --norc --noprofile",
        ]);
        Pane(name)
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.0];
        args.extend_from_slice(keys);
        tmux(&args);
    }

    fn screen(&self) -> String {
        tmux(&["capture-pane", "-t", &self.0, "-p"])
    }

    /// Waits until the screen satisfies `pred`; returns it.
    fn wait(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let screen = self.screen();
            if pred(&screen) {
                return screen;
            }
            assert!(Instant::now() < deadline, "{what}; the screen:\n{screen}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .output();
    }
}

/// The `EVENTS IN/s` column of the component's row, when it shows a number other than 0.
fn rate_of(screen: &str, id: &str) -> Option<String> {
    screen
        .lines()
        .find(|l| l.split_whitespace().next() == Some(id))
        .and_then(|l| l.split_whitespace().nth(3).map(str::to_owned))
        .filter(|r| r != "0")
}

#[test]
fn top_shows_every_component_with_live_rates_and_q_restores_the_terminal() {
    let mut server = Server::start(&routed_config(""));
    let port = server.ports.tcp;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut s = connect(port);
            let mut i = 0u64;
            // Bounded: at most 60 s of 20,000 events a second.
            for _ in 0..600 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let mut chunk = String::new();
                for _ in 0..2000 {
                    chunk.push_str(&line3164(&format!("load {i}")));
                    i += 1;
                }
                s.write_all(chunk.as_bytes()).expect("send load");
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let pane = Pane::new(format!("loghaul-top-{}", std::process::id()));
    let command = format!(
        "{BIN} top --api http://127.0.0.1:{}; echo TOP-EXIT=$?",
        server.ports.api
    );
    pane.keys(&[&command, "Enter"]);
    let screen = pane.wait("every component shows a rate", |s| {
        ["in", "sev", "out"]
            .iter()
            .all(|id| rate_of(s, id).is_some())
    });
    assert!(screen.contains("EVENTS IN/s"), "{screen}");
    assert!(screen.contains("syslog") && screen.contains("route") && screen.contains("file"));
    // Sorting by the next column keeps the rows.
    pane.keys(&["s"]);
    pane.wait("sorted by TYPE", |s| s.contains("TYPE ▲"));
    pane.keys(&["q"]);
    let screen = pane.wait("top exits on q", |s| s.contains("TOP-EXIT=0"));
    // The alternate screen is gone: the shell's own lines are back, the table is not.
    assert!(screen.contains(" top --api "), "{screen}");
    assert!(!screen.contains("EVENTS IN/s"), "{screen}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.join().expect("the load thread");
    server.stop();
}
