//! loghaul's own log lines (on stderr, text or JSON, their level from -v/-q or `LOGHAUL_LOG`),
//! and how a command's output behaves on a closed pipe.

/// Sets up loghaul's own logging: `-v` debug, `-vv` trace, `-q` warnings, `-qq` errors;
/// `LOGHAUL_LOG` (an `EnvFilter`, e.g. `info,loghaul=debug`) wins over them. JSON lines when
/// `json`, else text, colored on a terminal.
pub fn init(verbose: u8, quiet: u8, json: bool) {
    use tracing_subscriber::EnvFilter;
    let default = match (verbose, quiet) {
        (0, 0) => "info",
        (0, 1) => "warn",
        (0, _) => "error",
        (1, _) => "info,loghaul=debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_env("LOGHAUL_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init();
    } else {
        builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
}

/// A command whose output goes into `| head` ends quietly when the pipe closes, as Unix tools
/// do, instead of panicking on the failed write. Not for `run`: a server's sockets report a
/// closed peer as an error to handle, never as a signal.
#[allow(unsafe_code)]
pub fn quiet_broken_pipe() {
    // SAFETY: restores the default disposition of one signal before any thread is started; no
    // handler of ours is replaced.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
