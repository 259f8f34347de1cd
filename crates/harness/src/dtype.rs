//! Element types: the grid's names, tch kinds and the tolerance each is checked against.

pub use shapes::DTypeName as DType;

/// The tch kind for a dtype.
pub fn kind(dtype: DType) -> tch::Kind {
    match dtype {
        DType::F32 => tch::Kind::Float,
        DType::F16 => tch::Kind::Half,
        DType::BF16 => tch::Kind::BFloat16,
    }
}

/// An op's tolerance against the float64 reference ([`DType::tolerance`], the one table).
pub fn tolerance(dtype: DType) -> f64 {
    dtype.tolerance(shapes::Check::Op)
}
