module ticketing.invalid/client-js

go 1.26
