//! Where the executor's registration with the driver stands, and what the end of its
//! connection to the driver means at each point. Two threads report to it: the one that
//! asked the driver to register the executor hears the ask's outcome, and the loop hears
//! the connection close, in either order. Before the driver accepted the executor, a
//! closed connection is the registration's failure, whose ask carries the cause (an
//! authentication refused, say); after, the driver is lost.
//!
//! The decision is made under one lock, from the state alone: whichever thread comes
//! second sees what the first decided, so a refused registration ends the executor with
//! the refusal's cause (exit code 77 for an authentication refused), never with "Driver
//! ... disassociated" because the loop happened to run between the two.

/// Where the registration stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Registration {
    /// The registration's ask is on its way.
    Pending,
    /// The connection closed while it was: the ask's outcome says why.
    PendingDisconnected,
    /// The driver accepted the executor over a connection still open: from now on a
    /// closed connection is the driver's loss.
    Registered,
    /// The registration failed, or was accepted over a connection that had closed: the
    /// thread that heard the outcome ends the executor with its cause.
    Ended,
}

/// What the ask's outcome means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answered {
    /// Registered: the executor starts its heartbeats.
    Registered,
    /// Accepted, but the connection closed before this thread heard of it: the driver
    /// is lost.
    AcceptedThenLost,
    /// Refused, or no answer: the executor ends with the ask's error or the refusal.
    Failed,
}

/// What the close of the driver's connection means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Disconnected {
    /// The registration's ask is still out: its outcome, which carries the close's
    /// cause, ends the executor.
    AwaitOutcome,
    /// The registration's outcome ended the executor already, with a better cause.
    AlreadyEnded,
    /// The driver is lost: the executor ends ("Driver ... disassociated!").
    DriverLost,
}

impl Registration {
    /// The registration's ask has its outcome; `accepted` if the driver answered
    /// RegisteredExecutor.
    pub(crate) fn on_outcome(&mut self, accepted: bool) -> Answered {
        let answered = match (*self, accepted) {
            (Registration::Pending, true) => Answered::Registered,
            (Registration::PendingDisconnected, true) => Answered::AcceptedThenLost,
            // A second outcome cannot come (one ask); were it to, it changes nothing.
            (Registration::Registered, true) => Answered::Registered,
            (_, _) => Answered::Failed,
        };
        *self = match answered {
            Answered::Registered => Registration::Registered,
            Answered::AcceptedThenLost | Answered::Failed => Registration::Ended,
        };
        answered
    }

    /// The connection to the driver closed.
    pub(crate) fn on_disconnected(&mut self) -> Disconnected {
        match *self {
            Registration::Pending => {
                *self = Registration::PendingDisconnected;
                Disconnected::AwaitOutcome
            }
            Registration::PendingDisconnected => Disconnected::AwaitOutcome,
            Registration::Registered => Disconnected::DriverLost,
            Registration::Ended => Disconnected::AlreadyEnded,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_close_after_the_driver_accepted_is_the_driver_s_loss() {
        let mut registration = Registration::Pending;
        assert_eq!(registration.on_outcome(true), Answered::Registered);
        assert_eq!(registration.on_disconnected(), Disconnected::DriverLost);
    }

    /// The race CI caught: the ask failed on an authentication refused, its thread
    /// heard of it before the loop ran `on_disconnected`, and the loop then ended the
    /// executor as "disassociated" (exit code 1) ahead of the refusal (77).
    #[test]
    fn a_close_heard_after_a_refused_registration_ends_nothing_more() {
        let mut registration = Registration::Pending;
        assert_eq!(registration.on_outcome(false), Answered::Failed);
        assert_eq!(registration.on_disconnected(), Disconnected::AlreadyEnded);
        assert_eq!(registration.on_disconnected(), Disconnected::AlreadyEnded);
    }

    #[test]
    fn a_close_heard_before_the_outcome_leaves_the_cause_to_the_outcome() {
        let mut registration = Registration::Pending;
        assert_eq!(registration.on_disconnected(), Disconnected::AwaitOutcome);
        assert_eq!(registration.on_disconnected(), Disconnected::AwaitOutcome);
        assert_eq!(registration.on_outcome(false), Answered::Failed);
        assert_eq!(registration.on_disconnected(), Disconnected::AlreadyEnded);
    }

    #[test]
    fn an_acceptance_over_a_connection_already_closed_is_the_driver_s_loss() {
        let mut registration = Registration::Pending;
        assert_eq!(registration.on_disconnected(), Disconnected::AwaitOutcome);
        assert_eq!(registration.on_outcome(true), Answered::AcceptedThenLost);
        assert_eq!(registration.on_disconnected(), Disconnected::AlreadyEnded);
    }
}
