//! Compiles `proto/bsky.proto` into Rust at build time.
//!
//! `protox` parses the proto in Rust, so building needs no `protoc` on the machine;
//! `tonic-prost-build` turns the resulting descriptors into prost messages and the tonic
//! server and client for `bsky.Service`.

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto/bsky.proto");
    let file_descriptors = protox::compile(["bsky.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        // The client is for tests and load generators; the AppView is the real caller.
        .build_client(true)
        // Without transport the generated client has no `connect`, so the library does not
        // need tonic's client stack; callers hand it a channel.
        .build_transport(false)
        .generate_default_stubs(false)
        .emit_rerun_if_changed(false)
        .compile_fds(file_descriptors)?;
    Ok(())
}
