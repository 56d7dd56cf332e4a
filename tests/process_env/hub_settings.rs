//! Hub settings from the process environment (HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE).

use nlg_judge::runtime::{resolve_card, FetchOptions, HubSettings, ModelCache};

use crate::common::hub::{card, checkpoint_files, StandInHub};

/// `HubSettings::from_env` reads HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE. (Variables are process-wide:
/// this test lives in the `process_env` binary, away from the tests that read them.)
#[test]
fn settings_from_environment() {
    let _environment = crate::environment();
    let dir = tempfile::tempdir().unwrap();
    let files = checkpoint_files(dir.path());
    let card = card(&files);
    let hub = StandInHub::start(files);
    let hf_home = dir.path().join("hf-home");
    std::env::set_var("HF_ENDPOINT", &hub.endpoint);
    std::env::set_var("HF_HOME", &hf_home);
    std::env::remove_var("HF_HUB_OFFLINE");
    let settings = HubSettings::from_env();
    assert_eq!(settings.endpoint.as_deref(), Some(hub.endpoint.as_str()));
    assert_eq!(settings.cache_dir, hf_home.join("hub"));
    assert!(!settings.offline);
    let online = FetchOptions::new(ModelCache::new(dir.path().join("cache")), settings);
    resolve_card(&card, &online).unwrap();
    assert!(hf_home.join("hub/models--test-org--tiny-t5").is_dir());

    std::env::set_var("HF_HUB_OFFLINE", "1");
    assert!(HubSettings::from_env().offline);
    std::env::remove_var("HF_HUB_OFFLINE");
    std::env::remove_var("HF_ENDPOINT");
    std::env::remove_var("HF_HOME");
    hub.shut_down();
}
