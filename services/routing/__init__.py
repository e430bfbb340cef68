"""Routing among a model's deployments, without I/O: which deployment to try next (balancer.py)
and whether one is resting after failures (breaker.py). The gateway's attempt loop
(gateway/inference/routing.py) drives them with Trio's clock."""
