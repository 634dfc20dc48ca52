"""How optimizer-state buffers are held (internal): plain float buffers of any dtype, the
block-wise 8-bit codec (`gradtx.quantized()`), and packing many leaves through one codec."""
