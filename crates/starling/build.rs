//! Records the commit the binary is built from as `STARLING_COMMIT`, for `starling_build_info`:
//! `STARLING_COMMIT` from the environment if set (a packager's build), else `git rev-parse`,
//! else `unknown` (a source tarball).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=STARLING_COMMIT");
    let commit = match std::env::var("STARLING_COMMIT") {
        Ok(commit) if !commit.is_empty() => commit,
        _ => {
            // Rebuild when HEAD moves: the HEAD file for a branch switch, the branch's ref for
            // a new commit on it.
            for path in [
                git(&["rev-parse", "--git-path", "HEAD"]),
                git(&["symbolic-ref", "-q", "HEAD"])
                    .and_then(|name| git(&["rev-parse", "--git-path", &name])),
            ]
            .into_iter()
            .flatten()
            {
                println!("cargo:rerun-if-changed={path}");
            }
            git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_owned())
        }
    };
    println!("cargo:rustc-env=STARLING_COMMIT={commit}");
}
