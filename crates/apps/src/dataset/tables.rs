//! The dataset's Parquet tables: frames (`data/`), episodes (`meta/episodes/`) and tasks
//! (`meta/tasks.parquet`), written whole and atomically, read back for appending and viewing.
//!
//! Column types are the ones lerobot v0.6.1 writes (`datasets/feature_utils.py`
//! `get_hf_features_from_features`; `dataset_writer.py`): a shape-`[1]` feature is a plain column,
//! a vector a `fixed_size_list<item>[n]`, video features no column at all; Snappy. lerobot writes a
//! row group per episode; here a file is one row group, as its footer otherwise grows by every
//! column of every episode and is rewritten after each (its loader reads either). A table file is always rewritten whole into a temporary file and renamed over
//! the old one, so a reader (or a crash) only ever sees a file with its footer.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{Float64Builder, Int64Builder, ListBuilder, StringBuilder};
use arrow_array::{
    Array, ArrayRef, BooleanArray, FixedSizeListArray, Float32Array, Float64Array, Int64Array,
    ListArray, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use super::info::Features;
use super::DatasetError;

/// One frame column's values for a whole episode, row-major (`frames × elements`).
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    /// A float32 feature.
    F32(Vec<f32>),
    /// A float64 feature.
    F64(Vec<f64>),
    /// An int64 feature.
    I64(Vec<i64>),
    /// A bool feature.
    Bool(Vec<bool>),
}

impl Column {
    /// Values held.
    pub fn len(&self) -> usize {
        match self {
            Column::F32(v) => v.len(),
            Column::F64(v) => v.len(),
            Column::I64(v) => v.len(),
            Column::Bool(v) => v.len(),
        }
    }

    /// Whether no value is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The numpy dtype string a feature holding this column declares.
    pub fn dtype(&self) -> &'static str {
        match self {
            Column::F32(_) => "float32",
            Column::F64(_) => "float64",
            Column::I64(_) => "int64",
            Column::Bool(_) => "bool",
        }
    }

    fn scalar_type(&self) -> DataType {
        match self {
            Column::F32(_) => DataType::Float32,
            Column::F64(_) => DataType::Float64,
            Column::I64(_) => DataType::Int64,
            Column::Bool(_) => DataType::Boolean,
        }
    }

    fn flat(&self) -> ArrayRef {
        match self {
            Column::F32(v) => Arc::new(Float32Array::from(v.clone())),
            Column::F64(v) => Arc::new(Float64Array::from(v.clone())),
            Column::I64(v) => Arc::new(Int64Array::from(v.clone())),
            Column::Bool(v) => Arc::new(BooleanArray::from(v.clone())),
        }
    }

    /// The column as lerobot lays it out: plain for one element per frame, a fixed-size list
    /// of `width` otherwise.
    fn to_arrow(&self, width: usize) -> Result<(DataType, ArrayRef), DatasetError> {
        let flat = self.flat();
        if width == 1 {
            return Ok((self.scalar_type(), flat));
        }
        let item = Arc::new(Field::new("element", self.scalar_type(), true));
        let list = FixedSizeListArray::try_new(item.clone(), width as i32, flat, None)
            .map_err(|e| DatasetError::Table(e.to_string()))?;
        Ok((
            DataType::FixedSizeList(item, width as i32),
            Arc::new(list) as ArrayRef,
        ))
    }
}

/// The `huggingface` schema metadata lerobot's tables carry (the `datasets` feature types), so
/// that tools reading the Parquet alone see the same types as the loader.
fn hf_metadata(features: &Features) -> String {
    let mut map = serde_json::Map::new();
    for (name, f) in features.0.iter().filter(|(_, f)| !f.is_video()) {
        let value = serde_json::json!({"dtype": f.dtype, "_type": "Value"});
        let entry = if f.len() == 1 {
            value
        } else {
            serde_json::json!({"feature": value, "length": f.len(), "_type": "List"})
        };
        map.insert(name.clone(), entry);
    }
    serde_json::json!({"info": {"features": map}}).to_string()
}

/// One episode's frames as a record batch: `columns` in the order of the non-video `features`.
pub fn frames_batch(
    features: &Features,
    columns: &[(&str, &Column)],
) -> Result<RecordBatch, DatasetError> {
    let mut fields = Vec::new();
    let mut arrays = Vec::new();
    for (name, feature) in features.0.iter().filter(|(_, f)| !f.is_video()) {
        let column = columns
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, c)| *c)
            .ok_or_else(|| DatasetError::Episode(format!("no values for feature `{name}`")))?;
        if column.dtype() != feature.dtype {
            return Err(DatasetError::Episode(format!(
                "feature `{name}` is {} but its values are {}",
                feature.dtype,
                column.dtype()
            )));
        }
        let (ty, array) = column.to_arrow(feature.len())?;
        fields.push(Field::new(name.as_str(), ty, true));
        arrays.push(array);
    }
    let schema = Schema::new(fields).with_metadata(
        [("huggingface".to_string(), hf_metadata(features))]
            .into_iter()
            .collect(),
    );
    RecordBatch::try_new(Arc::new(schema), arrays).map_err(|e| DatasetError::Table(e.to_string()))
}

/// One cell of a one-row table (an episode's metadata row).
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// int64
    I64(i64),
    /// double
    F64(f64),
    /// bool
    Bool(bool),
    /// string
    Str(String),
    /// list<string>
    StrList(Vec<String>),
    /// list<double>
    F64List(Vec<f64>),
    /// list<int64>
    I64List(Vec<i64>),
    /// list<list<list<double>>> of shape (n, 1, 1): an image feature's per-channel statistic.
    F64Cube(Vec<f64>),
}

fn list_field(ty: DataType) -> Arc<Field> {
    Arc::new(Field::new("element", ty, true))
}

impl Cell {
    fn to_arrow(&self) -> (DataType, ArrayRef) {
        match self {
            Cell::I64(v) => (DataType::Int64, Arc::new(Int64Array::from(vec![*v]))),
            Cell::F64(v) => (DataType::Float64, Arc::new(Float64Array::from(vec![*v]))),
            Cell::Bool(v) => (DataType::Boolean, Arc::new(BooleanArray::from(vec![*v]))),
            Cell::Str(v) => (
                DataType::Utf8,
                Arc::new(StringArray::from(vec![v.as_str()])),
            ),
            Cell::StrList(v) => {
                let mut b =
                    ListBuilder::new(StringBuilder::new()).with_field(list_field(DataType::Utf8));
                for s in v {
                    b.values().append_value(s);
                }
                b.append(true);
                (
                    DataType::List(list_field(DataType::Utf8)),
                    Arc::new(b.finish()),
                )
            }
            Cell::F64List(v) => {
                let mut b = ListBuilder::new(Float64Builder::new())
                    .with_field(list_field(DataType::Float64));
                b.values().append_slice(v);
                b.append(true);
                (
                    DataType::List(list_field(DataType::Float64)),
                    Arc::new(b.finish()),
                )
            }
            Cell::I64List(v) => {
                let mut b =
                    ListBuilder::new(Int64Builder::new()).with_field(list_field(DataType::Int64));
                b.values().append_slice(v);
                b.append(true);
                (
                    DataType::List(list_field(DataType::Int64)),
                    Arc::new(b.finish()),
                )
            }
            Cell::F64Cube(v) => {
                // pyarrow names every list's item `element`, at each depth.
                let inner = DataType::List(list_field(DataType::Float64));
                let middle = DataType::List(list_field(inner.clone()));
                let mut b = ListBuilder::new(
                    ListBuilder::new(
                        ListBuilder::new(Float64Builder::new())
                            .with_field(list_field(DataType::Float64)),
                    )
                    .with_field(list_field(inner)),
                )
                .with_field(list_field(middle));
                for x in v {
                    let rows = b.values();
                    rows.values().values().append_value(*x);
                    rows.values().append(true);
                    rows.append(true);
                }
                b.append(true);
                let array = b.finish();
                (array.data_type().clone(), Arc::new(array))
            }
        }
    }
}

/// A one-row table of `cells`, in their order.
pub fn row_batch(cells: &[(String, Cell)]) -> Result<RecordBatch, DatasetError> {
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = cells
        .iter()
        .map(|(name, cell)| {
            let (ty, array) = cell.to_arrow();
            (Field::new(name.as_str(), ty, true), array)
        })
        .unzip();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
        .map_err(|e| DatasetError::Table(e.to_string()))
}

/// The tasks table's column of task strings: pandas' name for an unnamed index.
pub const TASK_COLUMN: &str = "__index_level_0__";

/// `meta/tasks.parquet`: `task_index` and the task strings, with the pandas metadata that makes
/// `pd.read_parquet` restore the strings as the index (lerobot looks tasks up by it and names
/// the index `task` after reading).
pub fn tasks_batch(tasks: &[String]) -> Result<RecordBatch, DatasetError> {
    // The layout pandas 2.3 / pyarrow 26 give `tasks.to_parquet(path)` for an unnamed string index.
    let pandas = serde_json::json!({
        "index_columns": ["__index_level_0__"],
        "column_indexes": [{"name": null, "field_name": null, "pandas_type": "unicode",
            "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
             "numpy_type": "int64", "metadata": null},
            {"name": null, "field_name": "__index_level_0__", "pandas_type": "unicode",
             "numpy_type": "object", "metadata": null}
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": "26.0.1"},
        "pandas_version": "2.3.3"
    });
    let schema = Schema::new(vec![
        Field::new("task_index", DataType::Int64, true),
        Field::new(TASK_COLUMN, DataType::Utf8, true),
    ])
    .with_metadata(
        [("pandas".to_string(), pandas.to_string())]
            .into_iter()
            .collect(),
    );
    let index: Vec<i64> = (0..tasks.len() as i64).collect();
    let names: Vec<&str> = tasks.iter().map(String::as_str).collect();
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from(index)),
            Arc::new(StringArray::from(names)),
        ],
    )
    .map_err(|e| DatasetError::Table(e.to_string()))
}

/// Writes `batches` (all of one schema, one row group in all) to `path` atomically: a temporary
/// file beside it, synced, then renamed over it.
pub fn write_parquet(path: &Path, batches: &[RecordBatch]) -> Result<(), DatasetError> {
    let first = batches
        .first()
        .ok_or_else(|| DatasetError::Table(format!("nothing to write to {}", path.display())))?;
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| DatasetError::io(dir, e))?;
    }
    let tmp = tmp_path(path);
    let file = fs::File::create(&tmp).map_err(|e| DatasetError::io(&tmp, e))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_created_by("pointact (parquet-rs 58)".into())
        .build();
    let table = |e: parquet::errors::ParquetError| DatasetError::Table(e.to_string());
    let mut writer = ArrowWriter::try_new(file, first.schema(), Some(props)).map_err(table)?;
    // One row group for the file: a footer describes each row group's every column, so a row
    // group per episode made the footers of wide tables (the episodes' statistics) grow with
    // every episode.
    for batch in batches {
        writer.write(batch).map_err(table)?;
    }
    let file = writer.into_inner().map_err(table)?;
    file.sync_all().map_err(|e| DatasetError::io(&tmp, e))?;
    drop(file);
    fs::rename(&tmp, path).map_err(|e| DatasetError::io(path, e))
}

/// Writes `bytes` to `path` atomically (temporary file, sync, rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DatasetError> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| DatasetError::io(dir, e))?;
    }
    let tmp = tmp_path(path);
    let write = || -> std::io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, bytes)?;
        f.sync_all()
    };
    write().map_err(|e| DatasetError::io(&tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| DatasetError::io(path, e))
}

/// `path` with `.tmp` appended to its file name (same folder, so the rename is atomic).
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Every record batch of a Parquet file.
pub fn read_parquet(path: &Path) -> Result<Vec<RecordBatch>, DatasetError> {
    let file = fs::File::open(path).map_err(|e| DatasetError::io(path, e))?;
    let bad = |e: &dyn std::fmt::Display| {
        DatasetError::Table(format!(
            "{} is not a readable Parquet table: {e}",
            path.display()
        ))
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| bad(&e))?
        .build()
        .map_err(|e| bad(&e))?;
    reader.map(|b| b.map_err(|e| bad(&e))).collect()
}

/// The Parquet files of a chunked table (`data/` or `meta/episodes/`) in lerobot's order: sorted
/// `chunk-XXX/file-XXX.parquet` paths.
pub fn table_files(dir: &Path) -> Result<Vec<PathBuf>, DatasetError> {
    let mut out = Vec::new();
    let chunks = match fs::read_dir(dir) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(DatasetError::io(dir, e)),
    };
    for chunk in chunks {
        let chunk = chunk.map_err(|e| DatasetError::io(dir, e))?.path();
        if !chunk.is_dir() {
            continue;
        }
        for file in fs::read_dir(&chunk).map_err(|e| DatasetError::io(&chunk, e))? {
            let file = file.map_err(|e| DatasetError::io(&chunk, e))?.path();
            if file.extension().is_some_and(|e| e == "parquet") {
                out.push(file);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A column of `batch` by name.
pub fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, DatasetError> {
    batch
        .column_by_name(name)
        .ok_or_else(|| DatasetError::Table(format!("the table has no column `{name}`")))
}

/// An int64 column's values.
pub fn i64_values(batch: &RecordBatch, name: &str) -> Result<Vec<i64>, DatasetError> {
    let c = column(batch, name)?;
    let a = c
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| DatasetError::Table(format!("column `{name}` is not int64")))?;
    Ok(a.iter().map(|v| v.unwrap_or(0)).collect())
}

/// A float64 column's values.
pub fn f64_values(batch: &RecordBatch, name: &str) -> Result<Vec<f64>, DatasetError> {
    let c = column(batch, name)?;
    let a = c
        .as_any()
        .downcast_ref::<Float64Array>()
        .ok_or_else(|| DatasetError::Table(format!("column `{name}` is not double")))?;
    Ok(a.iter().map(|v| v.unwrap_or(f64::NAN)).collect())
}

/// A string column's values (`None` for nulls).
pub fn str_values(batch: &RecordBatch, name: &str) -> Result<Vec<Option<String>>, DatasetError> {
    let c = column(batch, name)?;
    let a = c
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| DatasetError::Table(format!("column `{name}` is not a string")))?;
    Ok(a.iter().map(|v| v.map(str::to_owned)).collect())
}

/// A bool column's values (`None` for nulls).
pub fn bool_values(batch: &RecordBatch, name: &str) -> Result<Vec<Option<bool>>, DatasetError> {
    let c = column(batch, name)?;
    let a = c
        .as_any()
        .downcast_ref::<BooleanArray>()
        .ok_or_else(|| DatasetError::Table(format!("column `{name}` is not bool")))?;
    Ok(a.iter().collect())
}

/// A float32 feature column's values, row-major (`rows × width`), whether it is stored plain or
/// as a (fixed-size) list.
pub fn f32_rows(batch: &RecordBatch, name: &str) -> Result<Vec<f32>, DatasetError> {
    let c = column(batch, name)?;
    let values: ArrayRef = if let Some(l) = c.as_any().downcast_ref::<FixedSizeListArray>() {
        l.values().clone()
    } else if let Some(l) = c.as_any().downcast_ref::<ListArray>() {
        l.values().clone()
    } else {
        c.clone()
    };
    let a = values
        .as_any()
        .downcast_ref::<Float32Array>()
        .ok_or_else(|| DatasetError::Table(format!("column `{name}` is not float32")))?;
    Ok(a.values().to_vec())
}

/// The non-video features a data table of `features` has, checked against a batch's columns:
/// names, in order.
pub fn check_frame_columns(batch: &RecordBatch, features: &Features) -> Result<(), DatasetError> {
    let want: Vec<&str> = features
        .0
        .iter()
        .filter(|(_, f)| !f.is_video())
        .map(|(n, _)| n.as_str())
        .collect();
    let schema = batch.schema();
    let have: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    if want != have {
        return Err(DatasetError::Table(format!(
            "the data table's columns {have:?} are not the features {want:?}"
        )));
    }
    Ok(())
}
