"""Suite-wide settings. Hypothesis: the health checks about how fast inputs are generated
(filtering, slow draws) are warnings about the machine and the strategies, not about warpy; on a
loaded 2-core CI machine they fail runs at random, so they are off. Every property still runs its
full number of examples."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "warpy", suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile("warpy")
