//! The short variant of the soak (issue 37): `fabcoll soak` under fabrun on shm and tcp, fewer
//! calls than the long run of the README, every rank's memory and descriptors flat and every
//! checked result right (the command's exit status says so; the table is printed on failure).

use std::process::Command;
use std::time::Duration;

#[path = "common/child.rs"]
mod child;

const FABRUN: &str = env!("CARGO_BIN_EXE_fabrun");
const FABCOLL: &str = env!("CARGO_BIN_EXE_fabcoll");

#[test]
fn a_short_soak_stays_flat_on_shm_and_tcp() {
    for fabric in ["shm", "tcp"] {
        let args = ["-n", "2", "--fabric", fabric, FABCOLL, "soak", "--small-calls", "50000", "--large-calls", "2000"];
        let o = child::run_limited(
            Command::new(FABRUN).args(args).env("FABCOLL_TIMEOUT", "30"),
            Duration::from_secs(120),
            |_| {},
        );
        assert!(o.status.success(), "{fabric}: soak failed\n{}\n{}", o.stdout, o.stderr);
        assert_eq!(o.stdout.matches("  flat").count(), 2, "{fabric}: both phases flat\n{}", o.stdout);
    }
}
