//! The one percentile every benchmark reports (the main binary's `Samples` and the A/B
//! binaries under `src/bin/`, which include this file by path).

/// Nearest-rank percentile of sorted samples (`q` in 0..=1): the smallest sample with at
/// least `q` of the samples at or below it. The default value (zero) when there are none.
pub fn percentile<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank() {
        let v: Vec<u32> = (1..=10).collect();
        assert_eq!(percentile(&v, 0.5), 5);
        assert_eq!(percentile(&v, 0.9), 9);
        assert_eq!(percentile(&v, 0.99), 10);
        assert_eq!(percentile(&v, 1.0), 10);
        assert_eq!(percentile(&v, 0.0), 1);
        assert_eq!(percentile::<u32>(&[], 0.5), 0);
        assert_eq!(percentile(&[7u32], 0.9), 7);
    }
}
