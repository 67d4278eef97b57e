"""The Random Energy Model of one attention row: participation ratios at T -> infinity
and at finite T, two-key moments, and heads."""
