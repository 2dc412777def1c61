"""Stage 3, maintain: a step's fired groups to the changelog of the query's result
(retractions included), one evaluation per step. No runner: the runners' step
drivers call it."""
