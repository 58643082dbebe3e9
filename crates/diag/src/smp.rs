//! smpquery, perfquery, saquery (placeholder).
