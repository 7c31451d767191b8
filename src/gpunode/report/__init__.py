"""``gpunode report``: the fleet report (host × setting drift, rail maps, validation, Kueue flavors)."""
