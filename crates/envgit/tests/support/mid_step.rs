//! Acting on the host in the middle of a step: the step's script says it has started and
//! waits (bounded) for the host's word, so the host acts on an event, never after a delay.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Env;

/// `then` after the step's attack: it says `STARTED` and waits (bounded) for the host's
/// `GO` (see [`go`]), so the host can act in the middle of the step.
pub fn pausing(then: &str) -> String {
    format!(
        "{then} && touch STARTED \
         && i=0; while [ ! -e GO ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done"
    )
}

/// `envgit run sh -c ATTACK` (built with [`pausing`]) started, once the step is at its
/// pause: an event, not a fixed delay.
pub fn started_until_go(mut run: Command, env: &Env, attack: &str) -> Child {
    let child = run
        .args(["run", "sh", "-c", attack])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(env, "STARTED");
    child
}

/// Waits (bounded) for the step to make `rel` in the project: the attack has run that far.
pub fn wait_for(env: &Env, rel: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !env.path(rel).exists() {
        assert!(Instant::now() < deadline, "the attack never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `envgit run sh -c "PLANT && touch PLANTED && sleep 600"` started by `run` (the project's
/// command, with whatever environment the test gave it), killed with `SIGKILL` once `plant`
/// has run: an event, and nothing of envgit ends the step.
pub fn killed_once_planted(mut run: Command, env: &Env, plant: &str) {
    let attack = format!("{plant} && touch PLANTED && sleep 600");
    let mut child = run
        .args(["run", "sh", "-c", &attack])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(env, "PLANTED");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Lets the paused step go on.
pub fn go(env: &Env) {
    std::fs::write(env.path("GO"), "").unwrap();
}
