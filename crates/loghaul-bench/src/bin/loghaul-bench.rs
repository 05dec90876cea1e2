//! Standalone entry point of the lab (`loghaul-bench gen | meter | run`), the same commands as
//! `loghaul bench ...`; the lab's own tests drive it. As a standalone binary it cannot start itself as
//! the loghaul subject: `bench run` then needs `--loghaul-bin` or `LOGHAUL_BIN`.

use clap::Parser;

#[derive(Parser)]
#[command(name = "loghaul-bench", version, about = "loghaul's benchmark lab")]
struct Args {
    #[command(subcommand)]
    cmd: loghaul_bench::cli::BenchCommand,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = loghaul_bench::cli::run(args.cmd) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
