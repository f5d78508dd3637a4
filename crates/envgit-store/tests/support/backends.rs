//! The store's tests about objects (trees, diffs, rewind and restore, fork, delta chains) run
//! once per object backend: the local packs and the in-memory backend.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use envgit_store::{MemoryBackend, Store};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Packs,
    Memory,
}

impl Backend {
    /// A new store for `project` at `dir` with its objects in this backend.
    pub fn create(self, dir: &Path, project: &Path) -> Store {
        match self {
            Backend::Packs => Store::create(dir, project).unwrap(),
            Backend::Memory => {
                Store::create_with(dir, project, Box::new(MemoryBackend::default())).unwrap()
            }
        }
    }
}

/// `store` opened again, as another process would: nothing cached, its objects where they are.
pub fn reopen(store: &Store) -> Store {
    match store.objects().as_any().downcast_ref::<MemoryBackend>() {
        Some(memory) => Store::open_with(store.dir(), Box::new(memory.another_handle())).unwrap(),
        None => Store::open(store.dir()).unwrap(),
    }
}

/// `on_every_backend!(name, …)`: for each `fn name(backend: Backend)`, a module `name` with one
/// test per backend (`name::packs`, `name::memory`).
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn packs() {
                super::$name(crate::support::backends::Backend::Packs)
            }
            #[test]
            fn memory() {
                super::$name(crate::support::backends::Backend::Memory)
            }
        }
    )*};
}
