//! envgit links its unwinder statically (libgcc_eh through build.rs's `static_unwinder.rs`, not
//! libgcc_s.so.1 loaded at every start). This test binary is linked by the same build script,
//! so it proves on that link what the gate relies on: a panic unwinds, runs its drops and
//! stays in its thread or task.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Sets its flag when dropped, which only unwinding does for a panicking frame.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn the_unwinder_is_linked_in_and_libgcc_s_never_loads() {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    assert!(
        !maps.contains("libgcc_s"),
        "libgcc_s.so.1 is mapped: build.rs did not link libgcc_eh.a (is it installed? `cc \
         -print-file-name=libgcc_eh.a`)\n{maps}"
    );
}

#[test]
fn a_panic_unwinds_through_drops_and_stays_in_its_thread() {
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = DropFlag(dropped.clone());
    let caught = std::panic::catch_unwind(move || {
        let _flag = flag;
        panic!("one request's handler fails");
    });
    assert!(caught.is_err());
    assert!(
        dropped.load(Ordering::SeqCst),
        "the drop ran while unwinding"
    );

    let joined = std::thread::spawn(|| panic!("a worker thread fails")).join();
    assert!(joined.is_err(), "the thread's panic reached its join");
}

#[test]
fn a_tasks_panic_stays_in_the_task() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let failed = tokio::spawn(async { panic!("one connection's task fails") }).await;
        assert!(failed.unwrap_err().is_panic());
        let next = tokio::spawn(async { 7 }).await.unwrap();
        assert_eq!(next, 7, "the runtime still runs tasks after one panicked");
    });
}
