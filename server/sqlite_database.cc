#include "server/sqlite_database.h"

#include <sqlite3.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace fsdpd::server {
namespace {

// A damaged file (a torn page, a bad disk) is DATA_LOSS, so callers can say what is damaged;
// everything else is INTERNAL.
absl::Status SqliteError(sqlite3* database, const std::string& what) {
  const std::string message = absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(database));
  const int code = sqlite3_errcode(database) & 0xff;
  if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB) return absl::DataLossError(message);
  return absl::InternalError(message);
}

}  // namespace

SqliteStatement::SqliteStatement(sqlite3* database, sqlite3_stmt* statement)
    : database_(database), statement_(statement) {}

SqliteStatement::SqliteStatement(SqliteStatement&& other) noexcept
    : database_(other.database_),
      statement_(std::exchange(other.statement_, nullptr)),
      bind_status_(std::move(other.bind_status_)) {}

SqliteStatement::~SqliteStatement() {
  if (statement_ != nullptr) sqlite3_finalize(statement_);
}

SqliteStatement& SqliteStatement::Bind(int index, int64_t value) {
  if (sqlite3_bind_int64(statement_, index, value) != SQLITE_OK) {
    bind_status_ = SqliteError(database_, "bind");
  }
  return *this;
}

SqliteStatement& SqliteStatement::Bind(int index, double value) {
  if (sqlite3_bind_double(statement_, index, value) != SQLITE_OK) {
    bind_status_ = SqliteError(database_, "bind");
  }
  return *this;
}

SqliteStatement& SqliteStatement::Bind(int index, const std::string& text) {
  if (sqlite3_bind_text(statement_, index, text.data(), static_cast<int>(text.size()),
                        SQLITE_TRANSIENT) != SQLITE_OK) {
    bind_status_ = SqliteError(database_, "bind");
  }
  return *this;
}

SqliteStatement& SqliteStatement::BindBlob(int index, const std::string& bytes) {
  if (sqlite3_bind_blob(statement_, index, bytes.data(), static_cast<int>(bytes.size()),
                        SQLITE_TRANSIENT) != SQLITE_OK) {
    bind_status_ = SqliteError(database_, "bind");
  }
  return *this;
}

absl::StatusOr<bool> SqliteStatement::Step() {
  if (!bind_status_.ok()) return bind_status_;
  const int code = sqlite3_step(statement_);
  if (code == SQLITE_ROW) return true;
  if (code == SQLITE_DONE) return false;
  return SqliteError(database_, absl::StrCat("step of \"", sqlite3_sql(statement_), "\""));
}

absl::Status SqliteStatement::Run() {
  absl::StatusOr<bool> row = Step();
  // Reset even after an error: a cached statement is run again, and an active one would make
  // COMMIT fail.
  sqlite3_reset(statement_);
  bind_status_ = absl::OkStatus();
  return row.status();
}

int64_t SqliteStatement::ColumnInt(int index) const {
  return sqlite3_column_int64(statement_, index);
}

double SqliteStatement::ColumnDouble(int index) const {
  return sqlite3_column_double(statement_, index);
}

std::string SqliteStatement::ColumnText(int index) const {
  const unsigned char* text = sqlite3_column_text(statement_, index);
  return text == nullptr ? std::string()
                         : std::string(reinterpret_cast<const char*>(text),
                                       sqlite3_column_bytes(statement_, index));
}

std::string SqliteStatement::ColumnBlob(int index) const {
  const void* blob = sqlite3_column_blob(statement_, index);
  return blob == nullptr
             ? std::string()
             : std::string(static_cast<const char*>(blob), sqlite3_column_bytes(statement_, index));
}

absl::StatusOr<SqliteDatabase> SqliteDatabase::Open(const std::string& path) {
  sqlite3* handle = nullptr;
  const int code =
      sqlite3_open_v2(path.c_str(), &handle,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (code != SQLITE_OK) {
    std::string message = handle != nullptr ? sqlite3_errmsg(handle) : sqlite3_errstr(code);
    sqlite3_close(handle);
    return absl::UnavailableError(absl::StrCat("cannot open database ", path, ": ", message));
  }
  SqliteDatabase database(handle);
  sqlite3_busy_timeout(handle, 5000);
  // WAL lets readers and the writer proceed together and survives a crash mid-write. A 32 MiB
  // page cache (SQLite's default is 2 MiB) holds the step-report index's hot pages at 1,000
  // ranks, so appending reports does not re-read pages from the file.
  for (const char* pragma : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL",
                             "PRAGMA foreign_keys=ON", "PRAGMA cache_size=-32768"}) {
    if (absl::Status status = database.Execute(pragma); !status.ok()) {
      return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
    }
  }
  return database;
}

SqliteDatabase::SqliteDatabase(SqliteDatabase&& other) noexcept
    : database_(std::exchange(other.database_, nullptr)) {}

SqliteDatabase& SqliteDatabase::operator=(SqliteDatabase&& other) noexcept {
  if (this != &other) {
    if (database_ != nullptr) sqlite3_close(database_);
    database_ = std::exchange(other.database_, nullptr);
  }
  return *this;
}

SqliteDatabase::~SqliteDatabase() {
  if (database_ != nullptr) sqlite3_close(database_);
}

absl::Status SqliteDatabase::Execute(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(database_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error != nullptr ? error : "unknown error";
    sqlite3_free(error);
    return absl::InternalError(absl::StrCat("sqlite: \"", sql.substr(0, 80), "\": ", message));
  }
  return absl::OkStatus();
}

absl::StatusOr<SqliteStatement> SqliteDatabase::Prepare(const std::string& sql) {
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(database_, sql.c_str(), static_cast<int>(sql.size()), &statement,
                         nullptr) != SQLITE_OK) {
    return SqliteError(database_, absl::StrCat("prepare \"", sql, "\""));
  }
  return SqliteStatement(database_, statement);
}

absl::Status SqliteDatabase::Migrate(const std::vector<std::string>& migrations) {
  absl::StatusOr<SqliteStatement> query = Prepare("PRAGMA user_version");
  if (!query.ok()) return query.status();
  absl::StatusOr<bool> row = query->Step();
  if (!row.ok()) return row.status();
  const int64_t version = *row ? query->ColumnInt(0) : 0;
  const int64_t known = static_cast<int64_t>(migrations.size());
  if (version > known) {
    return absl::FailedPreconditionError(absl::StrCat("database schema version ", version,
                                                      " is newer than this fsdpd understands (",
                                                      known, "); upgrade fsdpd"));
  }
  for (int64_t next = version; next < known; ++next) {
    SqliteTransaction transaction(*this);
    if (!transaction.status().ok()) return transaction.status();
    if (absl::Status status = Execute(migrations[next]); !status.ok()) return status;
    if (absl::Status status = Execute(absl::StrCat("PRAGMA user_version = ", next + 1));
        !status.ok()) {
      return status;
    }
    if (absl::Status status = transaction.Commit(); !status.ok()) return status;
  }
  return absl::OkStatus();
}

SqliteTransaction::SqliteTransaction(SqliteDatabase& database)
    : database_(database), begin_status_(database.Execute("BEGIN IMMEDIATE")) {}

SqliteTransaction::~SqliteTransaction() {
  if (!done_ && begin_status_.ok()) database_.Execute("ROLLBACK").IgnoreError();
}

absl::Status SqliteTransaction::Commit() {
  if (!begin_status_.ok()) return begin_status_;
  done_ = true;
  absl::Status status = database_.Execute("COMMIT");
  if (!status.ok()) database_.Execute("ROLLBACK").IgnoreError();
  return status;
}

}  // namespace fsdpd::server
