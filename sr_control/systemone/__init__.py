"""The System One protocol layer: schema IDs, deviations, IR, codecs and plans. No I/O."""
