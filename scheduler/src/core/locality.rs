//! Task locality: where a task would like to run, and how close an offer is to that.

use std::fmt;

use flint_wire::SharedStr;

/// How close a launched task is to its preferred data, from most to least local (the
/// seeds' `TaskLocality`). The order of the variants is the order the scheduler tries
/// them in; a level "allows" every level before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaskLocality {
    /// On an executor that holds the task's data.
    ProcessLocal,
    /// On a host that holds the task's data.
    NodeLocal,
    /// The task has no preference.
    NoPref,
    /// On a host in the rack that holds the task's data.
    RackLocal,
    /// Anywhere.
    Any,
}

impl TaskLocality {
    /// Every level, most local first.
    pub const ALL: [TaskLocality; 5] = [
        TaskLocality::ProcessLocal,
        TaskLocality::NodeLocal,
        TaskLocality::NoPref,
        TaskLocality::RackLocal,
        TaskLocality::Any,
    ];

    /// Whether a task at level `self` may be launched when `constraint` is the loosest
    /// level allowed.
    pub fn is_allowed_by(self, constraint: TaskLocality) -> bool {
        self <= constraint
    }

    /// The level's name as the seeds print it.
    pub fn name(self) -> &'static str {
        match self {
            TaskLocality::ProcessLocal => "PROCESS_LOCAL",
            TaskLocality::NodeLocal => "NODE_LOCAL",
            TaskLocality::NoPref => "NO_PREF",
            TaskLocality::RackLocal => "RACK_LOCAL",
            TaskLocality::Any => "ANY",
        }
    }
}

impl fmt::Display for TaskLocality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A place a task prefers to run (Spark's `TaskLocation`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TaskLocation {
    /// A host that holds the task's input.
    Host(SharedStr),
    /// An executor that has the task's input cached, on its host.
    Executor {
        /// The executor's host.
        host: SharedStr,
        /// The executor.
        executor_id: SharedStr,
    },
}

impl TaskLocation {
    /// The host of the location.
    pub fn host(&self) -> &SharedStr {
        match self {
            TaskLocation::Host(host) | TaskLocation::Executor { host, .. } => host,
        }
    }
}
