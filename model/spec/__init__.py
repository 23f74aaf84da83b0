"""The specification: the floor below the RTL. The draft model's numerics (its float and
integer references), the encodings the control RTL shares with its host (`protocol`) and the
golden models written from the specification. Imports nothing above it."""
