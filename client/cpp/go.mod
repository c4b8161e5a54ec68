module ticketing.invalid/client-cpp

go 1.26
