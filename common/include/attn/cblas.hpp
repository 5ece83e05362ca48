// The CBLAS interface (cblas_sgemm and its enums) for the sources that call OpenBLAS directly.
//
// xtensor-blas bundles FLENS, whose cblas.h declares CBLAS. Version 0.20 (Debian 12) includes it from
// <xtensor-blas/xlinalg.hpp>, and OpenBLAS's own <cblas.h> then clashes with it (the same enums, defined twice);
// 0.21 (Debian 13) still ships it but no longer includes it, so a source that calls cblas_sgemm must declare it
// itself. Including FLENS's header on both gives one set of declarations either way; <cblas.h> serves where
// xtensor-blas has no FLENS.
#pragma once

#if __has_include(<xflens/cxxblas/drivers/cblas.h>)
#include <xflens/cxxblas/drivers/cblas.h>
#else
#include <cblas.h>
#endif
