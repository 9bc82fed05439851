"""Scheduler profile configuration (the reference's ``KubeSchedulerProfile``)."""

from kopf_scheduler.config.profile import (
    DEFAULT_SCHEDULER_NAME,
    PluginConfig,
    PluginRef,
    Plugins,
    PluginSet,
    ProfileError,
    ResolvedPlugins,
    SchedulerProfileSpec,
    default_profile,
    load_profile,
    merge_plugins,
    profile_json_schema,
    resolve_plugins,
)

__all__ = [
    "DEFAULT_SCHEDULER_NAME",
    "PluginConfig",
    "PluginRef",
    "PluginSet",
    "Plugins",
    "ProfileError",
    "ResolvedPlugins",
    "SchedulerProfileSpec",
    "default_profile",
    "load_profile",
    "merge_plugins",
    "profile_json_schema",
    "resolve_plugins",
]
