"""Pure coordinator decisions: plain values in, plain values out, no I/O, no pb2."""
