//! The status page of the drivers `flint` starts (`ui.enabled`, `ui.port`): see
//! [`flint_ui`].

use flint_rpc::Conf;
use flint_scheduler::Driver;
use flint_ui::{StatusServer, UiConfig, PUBLISH_INTERVAL};

use crate::job::JobError;

/// Starts the status page of `driver` if `ui.enabled` (the default), named `name` in the
/// API. A page that cannot be served (every port from `ui.port` on taken) is a warning,
/// not a failure: the job matters more than its page.
pub fn serve(conf: &Conf, driver: &Driver, name: &str) -> Result<Option<StatusServer>, JobError> {
    let config = UiConfig::from_conf(conf)?;
    if !config.enabled {
        return Ok(None);
    }
    let board = driver.publish_status(PUBLISH_INTERVAL)?;
    let app_id = format!("flint-{}", std::process::id());
    match StatusServer::start(board, &config, &app_id, name) {
        Ok(server) => Ok(Some(server)),
        Err(e) => {
            tracing::warn!("no status page: {e}");
            Ok(None)
        }
    }
}
