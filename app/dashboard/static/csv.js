// CSV text in and out for the scoring page, in the scoring model's columns: an optional id
// column (the schema's id_column, else ``id``) and one column per feature of its declared
// schema, by name (any order; other columns are ignored and named). Every problem names its
// row and column. No DOM here.

import { parseCell } from "./schema.js";

/** Parse CSV text (RFC 4180 quoting, CRLF or LF) into rows of trimmed cells, with line numbers. */
export function parseCsv(text) {
  const rows = [];
  let row = [];
  let cell = "";
  let quoted = false;
  let line = 1;
  let rowLine = 1;
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        cell += '"';
        i += 1;
      } else if (c === '"') quoted = false;
      else {
        if (c === "\n") line += 1;
        cell += c;
      }
    } else if (c === '"') quoted = true;
    else if (c === ",") {
      row.push(cell.trim());
      cell = "";
    } else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i += 1;
      row.push(cell.trim());
      if (row.some((v) => v !== "")) rows.push({ line: rowLine, cells: row });
      row = [];
      cell = "";
      line += 1;
      rowLine = line;
    } else cell += c;
  }
  row.push(cell.trim());
  if (row.some((v) => v !== "")) rows.push({ line: rowLine, cells: row });
  return rows;
}

/** Where a problem is: "row 2 (line 3), column phq9". Rows count patients, from 1. */
export function place(patient, column) {
  return `row ${patient.row} (line ${patient.line}), column ${column}`;
}

function headerOf(rows, features, idName) {
  const header = rows[0].cells.map((c) => c.toLowerCase());
  header.forEach((name, i) => {
    const first = header.indexOf(name);
    if (name !== "" && first !== i) {
      throw new Error(`The header (line ${rows[0].line}) names the column ${name} twice `
        + `(columns ${first + 1} and ${i + 1}).`);
    }
  });
  const missing = features.filter((f) => !header.includes(f.name)).map((f) => f.name);
  if (missing.length) {
    throw new Error(`The header (line ${rows[0].line}) lacks the column(s) of the model's `
      + `features: ${missing.join(", ")}. Expected: ${columnsOf(features, idName).join(",")}.`);
  }
  return header;
}

/** The schema's id column: its declared ``id_column``, else ``id``. */
export function idColumnOf(schema) {
  return schema?.id_column || "id";
}

function readRow(row, k, header, features, idName) {
  const patient = { row: k + 1, line: row.line, id: "", features: {}, errors: [] };
  const idColumn = header.indexOf(idName);
  if (idColumn >= 0) patient.id = row.cells[idColumn] ?? "";
  if (row.cells.length > header.length) {
    patient.errors.push(`row ${patient.row} (line ${row.line}) has ${row.cells.length} cells `
      + `but the header has ${header.length} columns`);
  }
  for (const feature of features) {
    const { value, error } = parseCell(feature, row.cells[header.indexOf(feature.name)] ?? "");
    if (error) patient.errors.push(`${place(patient, feature.name)}: ${error}`);
    else patient.features[feature.name] = value;
  }
  patient.error = patient.errors.join("; ") || null;
  return patient;
}

/**
 * CSV text as patients of the given schema features: ``{patients, ignored}``, each patient with
 * its row, line, id (from the column ``idName``, the schema's id column, or else from ``id``),
 * features and ``error`` (null when every cell is valid); ``ignored`` names the columns that
 * are not the model's. A header problem throws.
 */
export function readPatients(text, features, idName = "id") {
  const rows = parseCsv(text);
  if (rows.length < 2) throw new Error("Give a header row and at least one patient row.");
  const header = headerOf(rows, features, idName);
  const used = header.includes(idName) || !header.includes("id") ? idName : "id";
  const known = new Set(columnsOf(features, used));
  const ignored = header.filter((name) => name !== "" && !known.has(name));
  const patients = rows.slice(1).map((row, k) => readRow(row, k, header, features, used));
  return { patients, ignored };
}

/** The columns of a CSV for these features: the id column, then the features in order. */
export function columnsOf(features, idName = "id") {
  return [idName, ...features.map((f) => f.name)];
}

/**
 * One CSV cell: quoted when it must be, and a text that a spreadsheet would run as a formula
 * (=, +, -, @ first) kept as text with a leading apostrophe. Numbers are written as they are.
 */
export function csvCell(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return Number.isFinite(value) ? String(value) : "";
  let text = String(value);
  if (/^[=+\-@\t\r]/.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) || text !== text.trim() ? `"${text.replace(/"/g, '""')}"` : text;
}

/** Rows of cells as CSV text (CRLF line ends, as RFC 4180 writes them). */
export function toCsv(rows) {
  return `${rows.map((cells) => cells.map(csvCell).join(",")).join("\r\n")}\r\n`;
}
