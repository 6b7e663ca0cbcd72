// A thin RAII layer over libsqlite3: one connection, prepared statements, transactions, and
// schema migrations numbered by PRAGMA user_version.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct sqlite3;
struct sqlite3_stmt;

namespace fsdpd::server {

class SqliteStatement {
 public:
  SqliteStatement(sqlite3* database, sqlite3_stmt* statement);
  SqliteStatement(SqliteStatement&& other) noexcept;
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;
  ~SqliteStatement();

  // Parameters are 1-based, as in SQL's ?1.
  SqliteStatement& Bind(int index, int64_t value);
  SqliteStatement& Bind(int index, double value);
  SqliteStatement& Bind(int index, const std::string& text);
  SqliteStatement& BindBlob(int index, const std::string& bytes);

  // True while a row is available; false at the end.
  absl::StatusOr<bool> Step();
  // Runs a statement that returns no rows and resets it, so it can be bound and run again.
  absl::Status Run();

  int64_t ColumnInt(int index) const;
  double ColumnDouble(int index) const;
  std::string ColumnText(int index) const;
  std::string ColumnBlob(int index) const;

 private:
  sqlite3* database_;
  sqlite3_stmt* statement_;
  absl::Status bind_status_;
};

class SqliteDatabase {
 public:
  static absl::StatusOr<SqliteDatabase> Open(const std::string& path);
  SqliteDatabase(SqliteDatabase&& other) noexcept;
  SqliteDatabase& operator=(SqliteDatabase&& other) noexcept;
  SqliteDatabase(const SqliteDatabase&) = delete;
  ~SqliteDatabase();

  absl::Status Execute(const std::string& sql);
  absl::StatusOr<SqliteStatement> Prepare(const std::string& sql);

  // Brings the schema to migrations.size(): migration i takes user_version i to i + 1.
  // Refuses a database written by a newer version.
  absl::Status Migrate(const std::vector<std::string>& migrations);

 private:
  explicit SqliteDatabase(sqlite3* database) : database_(database) {}
  sqlite3* database_ = nullptr;
};

// BEGIN IMMEDIATE on construction, ROLLBACK on destruction unless Commit succeeded.
class SqliteTransaction {
 public:
  explicit SqliteTransaction(SqliteDatabase& database);
  ~SqliteTransaction();
  const absl::Status& status() const { return begin_status_; }
  absl::Status Commit();

 private:
  SqliteDatabase& database_;
  absl::Status begin_status_;
  bool done_ = false;
};

}  // namespace fsdpd::server
