//! Records what `loghaul --version` says beyond the crate's version: the commit it was built
//! from (when built in a git checkout) and the target triple.

fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| o.status.success() && !o.stdout.is_empty());
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_owned());
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".to_owned());
    println!(
        "cargo:rustc-env=LOGHAUL_BUILD=commit {commit}{}, {target}, {profile} build",
        if dirty { "+changes" } else { "" }
    );
    // Relative relocations packed (DT_RELR, glibc 2.36+, binutils 2.38+): the dynamic loader
    // reads 2 MiB of `.rela.dyn` at every start otherwise, and those pages stay resident for
    // the life of the process (an idle server was 17 MiB, 2 of them this table).
    if target.ends_with("linux-gnu") {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    // A new commit changes the version line; the index changes with every commit and checkout.
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/index");
    println!("cargo:rerun-if-changed=build.rs");
}
