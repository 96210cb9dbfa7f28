//! Signed agents' checks in flight on one worker (VM memory): queued until the root
//! context sends their callout, then dispatched until the answer (or failure) comes
//! ([`crate::identity::signed_agents`] adds them, [`crate::identity::signature_callouts`]
//! sends and answers them).

use crate::identity::verifier_flights::{FlightState, Waiter};

/// Most signature checks in flight on one worker.
pub const MAX_CHECKS: usize = 1024;

/// One signed request's check.
#[derive(Debug)]
pub struct SignatureCheck<W> {
    /// The paused request (`None` in shadow mode, or once given up on).
    pub waiter: Option<Waiter<W>>,
    /// The agent (index in `signed_agents.agents`).
    pub agent: usize,
    /// The callout body: a [`Request`] as JSON.
    pub body: Vec<u8>,
    /// Queued or dispatched.
    pub state: FlightState,
    /// Answer by then (ns since the Unix epoch).
    pub deadline_ns: u64,
}

/// The checks of one worker, first come first served (a plain list: at most
/// [`MAX_CHECKS`], scanned when one is added, sent or answered).
#[derive(Debug)]
pub struct SignatureChecks<W> {
    checks: Vec<(u64, SignatureCheck<W>)>,
    next_seq: u64,
}

impl<W> Default for SignatureChecks<W> {
    fn default() -> Self {
        SignatureChecks {
            checks: Vec::new(),
            next_seq: 0,
        }
    }
}

impl<W> SignatureChecks<W> {
    /// Checks in flight.
    pub fn len(&self) -> usize {
        self.checks.len()
    }

    /// True when none is in flight.
    pub fn is_empty(&self) -> bool {
        self.checks.is_empty()
    }

    /// Queues `check`; its sequence number, or `None` when [`MAX_CHECKS`] are in flight.
    pub fn add(&mut self, check: SignatureCheck<W>) -> Option<u64> {
        if self.checks.len() >= MAX_CHECKS {
            return None;
        }
        let seq = self.next_seq;
        self.checks.push((seq, check));
        self.next_seq += 1;
        Some(seq)
    }

    /// The queued checks, oldest first: `(seq, deadline, body)`.
    pub fn queued(&self) -> Vec<(u64, u64, Vec<u8>)> {
        self.checks
            .iter()
            .filter(|(_, c)| c.state == FlightState::Queued)
            .map(|(s, c)| (*s, c.deadline_ns, c.body.clone()))
            .collect()
    }

    /// Records that check `seq`'s callout was sent with `token`.
    pub fn dispatched(&mut self, seq: u64, token: u32) {
        if let Some((_, c)) = self.checks.iter_mut().find(|(s, _)| *s == seq) {
            c.state = FlightState::Dispatched(token);
            c.body = Vec::new();
        }
    }

    /// Removes and returns the check answered with `token`.
    pub fn take_by_token(&mut self, token: u32) -> Option<SignatureCheck<W>> {
        let i = self
            .checks
            .iter()
            .position(|(_, c)| c.state == FlightState::Dispatched(token))?;
        Some(self.checks.remove(i).1)
    }

    /// Removes and returns check `seq`.
    pub fn take(&mut self, seq: u64) -> Option<SignatureCheck<W>> {
        let i = self.checks.iter().position(|(s, _)| *s == seq)?;
        Some(self.checks.remove(i).1)
    }

    /// The waiters past their deadline at `now_ns`, taken out (their checks stay while
    /// dispatched, so the answer is still counted), and how many queued checks were
    /// dropped so (each ends without an answer).
    pub fn expire(&mut self, now_ns: u64) -> (Vec<(usize, Waiter<W>)>, usize) {
        let mut late = Vec::new();
        for (_, c) in &mut self.checks {
            if c.deadline_ns <= now_ns {
                if let Some(w) = c.waiter.take() {
                    late.push((c.agent, w));
                }
            }
        }
        let before = self.checks.len();
        self.checks
            .retain(|(_, c)| !(c.deadline_ns <= now_ns && c.state == FlightState::Queued));
        (late, before - self.checks.len())
    }

    /// Removes every check (the root goes away) and returns their waiters.
    pub fn drain(&mut self) -> Vec<(usize, Waiter<W>)> {
        std::mem::take(&mut self.checks)
            .into_iter()
            .filter_map(|(_, c)| c.waiter.map(|w| (c.agent, w)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(deadline_ns: u64, waiter: bool) -> SignatureCheck<u32> {
        SignatureCheck {
            waiter: waiter.then_some(Waiter {
                context: 7,
                handle: 7,
                deadline_ns,
            }),
            agent: 0,
            body: b"{}".to_vec(),
            state: FlightState::Queued,
            deadline_ns,
        }
    }

    #[test]
    fn checks_are_sent_answered_by_token_and_bounded() {
        let mut c = SignatureChecks::default();
        let a = c.add(check(100, true)).unwrap();
        let b = c.add(check(200, false)).unwrap();
        assert_eq!(
            c.queued().iter().map(|q| q.0).collect::<Vec<_>>(),
            vec![a, b]
        );
        c.dispatched(a, 41);
        assert_eq!(c.queued().len(), 1);
        assert!(c.take_by_token(40).is_none());
        let answered = c.take_by_token(41).unwrap();
        assert!(answered.waiter.is_some() && answered.body.is_empty());
        assert_eq!(c.len(), 1);
        for _ in 1..MAX_CHECKS {
            assert!(c.add(check(300, true)).is_some());
        }
        assert!(c.add(check(300, true)).is_none());
    }

    #[test]
    fn late_waiters_are_given_up_and_dispatched_checks_stay_for_their_answer() {
        let mut c = SignatureChecks::default();
        let a = c.add(check(100, true)).unwrap();
        let _queued = c.add(check(100, true)).unwrap();
        let _later = c.add(check(500, true)).unwrap();
        c.dispatched(a, 9);
        let (late, dropped) = c.expire(100);
        assert_eq!((late.len(), dropped), (2, 1));
        // The dispatched one stays, without its waiter; the later one keeps its own.
        assert_eq!(c.len(), 2);
        assert!(c.take_by_token(9).is_some_and(|x| x.waiter.is_none()));
        assert_eq!(c.drain().len(), 1);
        assert!(c.is_empty());
    }
}
