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

/// The largest relative error ‖out − ref‖ / ‖ref‖ a case may show against the float64
/// reference before it is a `mismatch`. Set from each type's unit roundoff (f32 2⁻²⁴, f16
/// 2⁻¹¹, bf16 2⁻⁸) with room for accumulation over long reductions (k up to 25600 and
/// softmax over 4k keys) and for reduced-precision accumulation in fast GPU kernels.
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-4,
        DType::F16 => 5e-3,
        DType::BF16 => 4e-2,
    }
}
