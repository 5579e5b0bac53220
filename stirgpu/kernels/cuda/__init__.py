"""The CUDA machinery every GPU kernel module shares: the package's ``.cu`` sources (package
data, beside this module) compiled lazily and memoised per device (:mod:`.compile`), CUDA array
arguments viewed without a copy (:mod:`.arrays`), and the image in the layouts the forward
kernels read (:mod:`.images`).  Importing it does no work and imports no GPU library.
"""
