//! Pinning applies to the whole process, so it is tested in a process of its own.

use duet::cpus::{CAN_PIN, allowed, pin};

#[test]
fn a_pin_holds_for_the_threads_there_and_those_started_after_it() {
    let may = allowed();
    assert!(!may.is_empty());
    let outside = may.iter().max().unwrap() + 1;
    assert!(
        pin(&[outside])
            .unwrap_err()
            .contains("not one this process may use")
    );
    if !CAN_PIN {
        assert!(pin(&may[..1]).is_err());
        return;
    }
    let last = *may.last().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let before = std::thread::spawn(move || {
        rx.recv().unwrap();
        allowed()
    });
    pin(&[last]).unwrap();
    tx.send(()).unwrap();
    assert_eq!(
        before.join().unwrap(),
        vec![last],
        "a thread started before"
    );
    let after = std::thread::spawn(allowed).join().unwrap();
    assert_eq!(after, vec![last], "a thread started after");
    assert_eq!(allowed(), vec![last]);
}
