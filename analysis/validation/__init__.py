"""The model against the GPU: the committed measurements (flashio.data), the calibration the
cross-check simulates with, the cross-check itself and the generated tables of
docs/validation.md."""
