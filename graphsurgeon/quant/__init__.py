"""Weight quantization: ncnn's block formats (``blocks``) and gsurg's quantizer for them."""
