// libsublinear.so is the allocator module linked whole; the exported symbols are the
// ones marked SUBLINEAR_API (include/sublinear/sublinear.h). Nothing else lives here.
