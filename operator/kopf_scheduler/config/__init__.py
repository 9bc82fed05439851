"""Scheduler profile configuration (the reference's ``KubeSchedulerProfile``)."""

from kopf_scheduler.config.profile import (
    DEFAULT_SCHEDULER_NAME,
    PluginConfig,
    PluginRef,
    Plugins,
    PluginSet,
    ProfileError,
    SchedulerProfileSpec,
    merge_plugins,
    parse_profile,
    profile_json_schema,
)

__all__ = [
    "DEFAULT_SCHEDULER_NAME",
    "PluginConfig",
    "PluginRef",
    "PluginSet",
    "Plugins",
    "ProfileError",
    "SchedulerProfileSpec",
    "merge_plugins",
    "parse_profile",
    "profile_json_schema",
]
