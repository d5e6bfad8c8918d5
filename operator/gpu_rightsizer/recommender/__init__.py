"""The recommender wing: metric source -> engine -> GPURecommendation status (never the apply state)."""
