//! Values that tests in more than one test binary give the code under test.

use flint_wire::Property;

/// The value of the first of [`local_properties`], the job's description: what a task
/// that looks for its properties expects to see.
pub const JOB_DESCRIPTION: &str = "nightly count";

/// Two local properties, as a job sets them on its task sets (a description and a job
/// group): for the tests that prove they travel with every task at no cost per task.
pub fn local_properties() -> Vec<Property> {
    vec![
        Property {
            key: "spark.job.description".into(),
            value: JOB_DESCRIPTION.into(),
        },
        Property {
            key: "spark.jobGroup.id".into(),
            value: "reports".into(),
        },
    ]
}
